-- Retry later's release step, for one group: one bounded window of its due times.
-- For each entry of the window, by due time:
--   - no longer pending (acked, dead-lettered), or owned by another consumer than the
--     parking one (claimed, or reclaimed by a worker before a sweep kept it parked), or
--     deleted from the stream while pending: its due time is dropped (ZREM) and the entry
--     left as it is (a deleted one is found by a worker's XAUTOCLAIM as payload missing);
--   - due (its time <= ARGV[3]): XCLAIM JUSTID with IDLE ARGV[4], so the next XAUTOCLAIM of
--     any live worker takes it, and ZREM;
--   - not due yet: XCLAIM JUSTID IDLE 0 to the parking consumer again, so its idle time
--     never reaches a worker's min-idle before it is due.
-- JUSTID never bumps the delivery count; nothing is ever acknowledged.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's due times (sorted set: entry id -> due epoch ms; same slot)
-- ARGV[1] - consumer group
-- ARGV[2] - the parking consumer
-- ARGV[3] - now, epoch ms
-- ARGV[4] - the idle time a due entry is given, in ms
-- ARGV[5] - the window's first rank (0-based, by due time)
-- ARGV[6] - most entries this run looks at
-- returns {looked, kept, released, dropped}; {-1, 0, 0, 0} when the group is gone (its due
--         times are deleted); {0, 0, 0, 0} when nothing is parked
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {0, 0, 0, 0}
end
if group_of(ARGV[1]) == nil then
  redis.call('DEL', KEYS[2])
  return {-1, 0, 0, 0}
end
local first = tonumber(ARGV[5])
local window = redis.call('ZRANGE', KEYS[2], first, first + tonumber(ARGV[6]) - 1, 'WITHSCORES')
local now = tonumber(ARGV[3])
local kept, released, dropped = 0, 0, 0
for i = 1, #window, 2 do
  local id, due = window[i], tonumber(window[i + 1])
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p == 0 or p[1][2] ~= ARGV[2] or #redis.call('XRANGE', KEYS[1], id, id) == 0 then
    redis.call('ZREM', KEYS[2], id)
    dropped = dropped + 1
  elseif due <= now then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[4], 'JUSTID')
    redis.call('ZREM', KEYS[2], id)
    released = released + 1
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', 0, 'JUSTID')
    kept = kept + 1
  end
end
return {#window / 2, kept, released, dropped}
