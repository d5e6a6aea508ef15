-- Retry later: park one pending entry on the parking consumer until it is due, and record
-- when it is due, in one atomic step. XCLAIM JUSTID IDLE 0 keeps the delivery count and
-- makes the entry look just delivered, so no worker's XAUTOCLAIM takes it before the
-- release step (later_release.lua) hands it back at its due time.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's due times (sorted set: entry id -> due epoch ms; same slot)
-- ARGV[1] - consumer group
-- ARGV[2] - entry id
-- ARGV[3] - the parking consumer (queue_core.services.LATER_CONSUMER)
-- ARGV[4] - when it is due, epoch ms
-- ARGV[5] - most entries the group may have parked at once
-- ARGV[6] - the consumer that must own the entry ('' for any owner)
-- returns {1, owner, deliveries, idle_before} on success (the state before),
--         {false, 'not-pending'} when the entry is not pending in the group,
--         {false, 'owner-changed', owner} when ARGV[6] is set and another consumer owns it,
--         {false, 'payload-missing'} when the entry was deleted from the stream (XCLAIM
--           would silently drop it from the pending list on Redis 7),
--         {false, 'too-many-parked', limit} when the group has ARGV[5] entries parked
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return {false, 'not-pending'}
end
local owner = pending[1][2]
if ARGV[6] ~= '' and ARGV[6] ~= owner then
  return {false, 'owner-changed', owner}
end
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
  return {false, 'payload-missing'}
end
if not redis.call('ZSCORE', KEYS[2], ARGV[2])
    and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  return {false, 'too-many-parked', tonumber(ARGV[5])}
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', 0, 'JUSTID')
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return {1, owner, pending[1][4], pending[1][3]}
