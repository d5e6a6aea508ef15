-- Trim a stream (XTRIM MINID), one chunk of at most ARGV[3] entries per run, never past
-- the floor unless forced. The floor is the smallest, over every group, of its oldest
-- pending id and the id just after its last-delivered id (its first undelivered entry):
-- MINID deletes the entries below it, so a MINID at or below the floor deletes nothing
-- that a group holds pending or has not been delivered yet; a MINID above it is refused
-- when an entry lies at or above the floor and below MINID. No groups: no floor.
-- The caller loops until done; each run re-checks the floor against the final MINID.
--
-- KEYS[1] - the stream
-- ARGV[1] - MINID (a full id)
-- ARGV[2] - '1' to trim past the floor
-- ARGV[3] - chunk size
-- returns {1, deleted, done (0|1), floor_id|false, floor_group|false, floor_reason|false},
--         {false, 'no-stream'} when the key is not a stream,
--         {false, 'past-floor', floor_id, group, reason} (reason: 'pending' | 'undelivered')
local U64MAX = '18446744073709551615'
local function incr(s)
  local out = ''
  for i = #s, 1, -1 do
    local d = s:byte(i) - 48
    if d < 9 then return s:sub(1, i - 1) .. string.char(d + 49) .. out end
    out = '0' .. out
  end
  return '1' .. out
end
local function succ(id)
  local ms, seq = id:match('^(%d+)-(%d+)$')
  if seq == U64MAX then return incr(ms) .. '-0' end
  return ms .. '-' .. incr(seq)
end

if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {false, 'no-stream'} end
local floor, floor_group, floor_reason = nil, nil, nil
for _, raw in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = map(raw)
  local candidate, reason = succ(g['last-delivered-id']), 'undelivered'
  if g['pending'] > 0 then
    local oldest = redis.call('XPENDING', KEYS[1], g['name'])[2]
    if idcmp(oldest, candidate) < 0 then candidate, reason = oldest, 'pending' end
  end
  if floor == nil or idcmp(candidate, floor) < 0 then
    floor, floor_group, floor_reason = candidate, g['name'], reason
  end
end
-- Past the floor only when an entry would go that a group still needs: one at or
-- above the floor and below MINID (ids in between with no entry cost nothing).
if floor and ARGV[2] ~= '1' and idcmp(ARGV[1], floor) > 0
    and #redis.call('XRANGE', KEYS[1], floor, '(' .. ARGV[1], 'COUNT', 1) > 0 then
  return {false, 'past-floor', floor, floor_group, floor_reason}
end

local chunk = tonumber(ARGV[3])
local step, done = ARGV[1], 1
if ARGV[1] ~= '0-0' then
  local page = redis.call('XRANGE', KEYS[1], '-', '(' .. ARGV[1], 'COUNT', chunk + 1)
  if #page > chunk then step, done = page[chunk + 1][1], 0 end
end
local deleted = redis.call('XTRIM', KEYS[1], 'MINID', step)
return {1, deleted, done, floor or false, floor_group or false, floor_reason or false}
