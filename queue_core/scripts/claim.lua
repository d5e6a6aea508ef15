-- Compare-and-set claim: XCLAIM one pending entry to a chosen consumer only if nobody has
-- touched it since the operator looked. A worker that reads or reclaims the entry resets
-- its idle time and bumps its delivery count, so either change means "changed since you
-- looked".
--
-- KEYS[1] - the stream
-- ARGV[1] - consumer group
-- ARGV[2] - entry id
-- ARGV[3] - the consumer to hand the entry to
-- ARGV[4] - the idle time the operator saw, in ms (the entry must be idle at least this)
-- ARGV[5] - the delivery count the operator saw ('' to skip that check)
-- ARGV[6] - the owner the operator saw ('' to skip that check); catches a JUSTID reclaim,
--           which resets the idle time without bumping the count
-- returns {1, previous_owner, deliveries_after, idle_before} on success,
--         {false, 'not-pending'} when the entry is not pending in the group,
--         {false, 'idle-changed', idle, owner} when the entry is idle less than ARGV[4],
--         {false, 'deliveries-changed', deliveries, owner} when the count differs from ARGV[5],
--         {false, 'owner-changed', owner} when the owner differs from ARGV[6],
--         {false, 'payload-missing'} when the entry was deleted from the stream (XCLAIM
--           would silently drop it from the pending list on Redis 7)
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return {false, 'not-pending'}
end
local owner = pending[1][2]
local idle = pending[1][3]
local deliveries = pending[1][4]
if ARGV[6] ~= '' and ARGV[6] ~= owner then
  return {false, 'owner-changed', owner}
end
if idle < tonumber(ARGV[4]) then
  return {false, 'idle-changed', idle, owner}
end
if ARGV[5] ~= '' and deliveries ~= tonumber(ARGV[5]) then
  return {false, 'deliveries-changed', deliveries, owner}
end
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
  return {false, 'payload-missing'}
end
-- Not JUSTID: handing the entry to a consumer is a delivery, and the count says so.
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2])
return {1, owner, deliveries + 1, idle}
