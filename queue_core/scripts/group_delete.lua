-- Delete a consumer group (XGROUP DESTROY) unless entries are pending in it; with pending
-- entries only when the operator acknowledged them (ARGV[3] = '1') and their count is
-- still the one the operator saw (ARGV[2]). The group's pause and heartbeat keys go with
-- it, so a group created later under the same name starts unpaused, with no workers.
-- Refused while an Ackboard worker of the group has a live heartbeat: on NOGROUP it
-- creates its group again (at its --group-start), which would undo the delete.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's pause key
-- KEYS[3] - the group's heartbeat hash
-- ARGV[1] - consumer group
-- ARGV[2] - the pending count the operator saw
-- ARGV[3] - '1' when the operator acknowledged dropping the pending entries
-- ARGV[4] - now, in ms
-- ARGV[5] - a heartbeat is live while now - seen_ms <= this (ms) and it has no
--           stopped_ms (the last heartbeat of a worker that stopped is never live)
-- returns {1, pending_dropped} on success,
--         {false, 'no-group'} when there is no such group (or no stream),
--         {false, 'pending', pending} when entries are pending and ARGV[3] is not '1',
--         {false, 'pending-changed', pending} when the count is no longer ARGV[2],
--         {false, 'live-workers', name, ...} while workers have live heartbeats

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' then return {false, 'no-group'} end
local found = nil
for _, raw in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = map(raw)
  if g['name'] == ARGV[1] then found = g end
end
if found == nil then return {false, 'no-group'} end
local live = {}
local beats = redis.call('HGETALL', KEYS[3])
for i = 1, #beats, 2 do
  local ok, decoded = pcall(cjson.decode, beats[i + 1])
  if ok and type(decoded) == 'table' and tonumber(decoded['seen_ms'])
      and type(decoded['stopped_ms']) ~= 'number'
      and tonumber(ARGV[4]) - tonumber(decoded['seen_ms']) <= tonumber(ARGV[5]) then
    table.insert(live, beats[i])
  end
end
if #live > 0 then return {false, 'live-workers', unpack(live)} end
local pending = found['pending']
if pending > 0 then
  if ARGV[3] ~= '1' then return {false, 'pending', pending} end
  if pending ~= tonumber(ARGV[2]) then return {false, 'pending-changed', pending} end
end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return {1, pending}
