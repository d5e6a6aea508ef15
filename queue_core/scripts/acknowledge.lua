-- Acknowledge (discard) one pending entry, reporting the state it was in before.
--
-- KEYS[1] - the stream
-- ARGV[1] - consumer group
-- ARGV[2] - entry id
-- ARGV[3] - the consumer that must own the entry ('' for any owner)
-- ARGV[4] - the idle time the entry must have reached, in ms ('' for no guard)
-- returns {1, owner, deliveries, idle} on success (the state before the XACK),
--         {false, 'not-pending'} when the entry is not pending in the group,
--         {false, 'owner-changed', owner} when ARGV[3] is set and another consumer owns it,
--         {false, 'idle-changed', idle} when ARGV[4] is set and the entry is idle less
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return {false, 'not-pending'}
end
local owner = pending[1][2]
local idle = pending[1][3]
if ARGV[3] ~= '' and ARGV[3] ~= owner then
  return {false, 'owner-changed', owner}
end
if ARGV[4] ~= '' and idle < tonumber(ARGV[4]) then
  return {false, 'idle-changed', idle}
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return {1, owner, pending[1][4], idle}
