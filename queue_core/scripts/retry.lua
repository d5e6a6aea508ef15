-- Make one pending entry due for redelivery within its own group, under its own id:
-- XCLAIM it to its current owner with a larger idle time and JUSTID, so the delivery count
-- is not bumped and a live worker's next XAUTOCLAIM sweep takes it. No copy is added to
-- the stream, so other consumer groups never see the entry twice.
--
-- KEYS[1] - the stream
-- ARGV[1] - consumer group
-- ARGV[2] - entry id
-- ARGV[3] - idle time to set, in ms (the larger of this and the current idle wins)
-- ARGV[4] - the consumer that must own the entry ('' for any owner)
-- ARGV[5] - the idle time the entry must have reached, in ms ('' for no guard)
-- returns {1, owner, deliveries, idle_before, idle_after} on success,
--         {false, 'not-pending'} when the entry is not pending in the group,
--         {false, 'payload-missing'} when the entry was deleted from the stream (XCLAIM
--           would silently drop it from the pending list on Redis 7),
--         {false, 'owner-changed', owner} when ARGV[4] is set and another consumer owns it,
--         {false, 'idle-changed', idle} when ARGV[5] is set and the entry is idle less
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return {false, 'not-pending'}
end
local owner = pending[1][2]
local idle = pending[1][3]
local deliveries = pending[1][4]
if ARGV[4] ~= '' and ARGV[4] ~= owner then
  return {false, 'owner-changed', owner}
end
if ARGV[5] ~= '' and idle < tonumber(ARGV[5]) then
  return {false, 'idle-changed', idle}
end
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
  return {false, 'payload-missing'}
end
local target = math.max(idle, tonumber(ARGV[3]))
redis.call('XCLAIM', KEYS[1], ARGV[1], owner, 0, ARGV[2], 'IDLE', target, 'JUSTID')
return {1, owner, deliveries, idle, target}
