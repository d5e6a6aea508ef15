-- Move one pending entry to the dead-letter stream and acknowledge it, in one atomic step:
-- it is never in both places and never in neither. Doing it twice leaves one copy.
--
-- KEYS[1] - the stream
-- KEYS[2] - its dead-letter stream (same cluster slot, see queue_core.keys)
-- KEYS[3] - the group's Retry later due times (same slot); the entry's is dropped
-- ARGV[1] - consumer group
-- ARGV[2] - entry id
-- ARGV[3] - reason
-- ARGV[4] - last handler error ('' when none)
-- ARGV[5] - operator who asked ('' when a worker moves it)
-- ARGV[6] - the consumer that must own the entry ('' for any owner)
-- ARGV[7] - the idle time the entry must have reached, in ms ('' for no guard); an
--           operator's "changed since you looked" check
-- ARGV[8..17] - the metadata field names (queue_core.keys.DEAD_LETTER_FIELDS), in the
--           order their values are written: origin stream, origin group, origin id,
--           consumer, deliveries, last error, reason, operator, dead-lettered-at (ms),
--           payload-missing ('1' when the entry's fields were already deleted)
-- returns {dlq_id, owner, deliveries, payload_missing} on success,
--         {false, 'not-pending'} when the entry is not pending in the group,
--         {false, 'owner-changed', owner} when ARGV[6] is set and another consumer owns it,
--         {false, 'idle-changed', idle} when ARGV[7] is set and the entry is idle less,
--         {false, 'too-many-fields', fields, limit} when the entry has more fields than
--           one XADD from a script can copy (Lua's unpack() returns at most ~8,000
--           values); nothing is changed and the entry stays pending
-- Lua 5.1's unpack() fails above ~8,000 values (LUAI_MAXCSTACK); keep a margin.
local MAX_VALUES = 7990
local META_VALUES = 2 * (#ARGV - 7)
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return {false, 'not-pending'}
end
local owner = pending[1][2]
local deliveries = pending[1][4]
if ARGV[6] ~= '' and ARGV[6] ~= owner then
  return {false, 'owner-changed', owner}
end
if ARGV[7] ~= '' and pending[1][3] < tonumber(ARGV[7]) then
  return {false, 'idle-changed', pending[1][3]}
end

local args = {}
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local missing = 1
if #entry == 1 and entry[1][2] and #entry[1][2] + META_VALUES > MAX_VALUES then
  return {false, 'too-many-fields', #entry[1][2] / 2, math.floor((MAX_VALUES - META_VALUES) / 2)}
end
if #entry == 1 and entry[1][2] then
  missing = 0
  for _, value in ipairs(entry[1][2]) do
    args[#args + 1] = value
  end
end
local now = redis.call('TIME')
local meta = {
  KEYS[1],
  ARGV[1],
  ARGV[2],
  owner,
  tostring(deliveries),
  ARGV[4],
  ARGV[3],
  ARGV[5],
  tostring(now[1] * 1000 + math.floor(now[2] / 1000)),
  tostring(missing),
}
for i, value in ipairs(meta) do
  args[#args + 1] = ARGV[7 + i]
  args[#args + 1] = value
end
local dlq_id = redis.call('XADD', KEYS[2], '*', unpack(args))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
return {dlq_id, owner, deliveries, missing}
