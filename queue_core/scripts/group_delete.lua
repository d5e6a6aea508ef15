-- Delete a consumer group (XGROUP DESTROY) unless entries are pending in it; with pending
-- entries only when the operator acknowledged them (ARGV[3] = '1') and their count is
-- still the one the operator saw (ARGV[2]). The group's pause and heartbeat keys go with
-- it, so a group created later under the same name starts unpaused, with no workers.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's pause key
-- KEYS[3] - the group's heartbeat hash
-- ARGV[1] - consumer group
-- ARGV[2] - the pending count the operator saw
-- ARGV[3] - '1' when the operator acknowledged dropping the pending entries
-- returns {1, pending_dropped} on success,
--         {false, 'no-group'} when there is no such group (or no stream),
--         {false, 'pending', pending} when entries are pending and ARGV[3] is not '1',
--         {false, 'pending-changed', pending} when the count is no longer ARGV[2]
local function map(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' then return {false, 'no-group'} end
local found = nil
for _, raw in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = map(raw)
  if g['name'] == ARGV[1] then found = g end
end
if found == nil then return {false, 'no-group'} end
local pending = found['pending']
if pending > 0 then
  if ARGV[3] ~= '1' then return {false, 'pending', pending} end
  if pending ~= tonumber(ARGV[2]) then return {false, 'pending-changed', pending} end
end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return {1, pending}
