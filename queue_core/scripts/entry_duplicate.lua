-- Add a copy of one entry's fields to the end of its stream (XADD *), in one atomic
-- step: the entry is read and copied with nothing in between. Ackboard's own fields
-- (the reserved prefix: a replay's target group, its replayed-from id) are not copied:
-- the copy is a new entry for every group, as a producer's XADD would be.
--
-- KEYS[1] - the stream
-- ARGV[1] - the entry id to copy
-- ARGV[2] - the reserved field prefix ('ackboard.')
-- returns {new_id, fields_copied, fields_left_out} on success,
--         {false, 'not-found'} when the stream holds no entry with that id (never added,
--           deleted or trimmed, or no such stream),
--         {false, 'no-fields'} when the entry has no field but Ackboard's own,
--         {false, 'too-many-fields', fields, limit}; nothing is changed by a refusal.
local MAX_VALUES = 7990
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return {false, 'not-found'}
end
local fields = found[1][2]
local prefix = ARGV[2]
local payload = {}
local left_out = 0
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, #prefix) == prefix then
    left_out = left_out + 1
  else
    payload[#payload + 1] = fields[i]
    payload[#payload + 1] = fields[i + 1]
  end
end
if #payload == 0 then
  return {false, 'no-fields'}
end
if #payload > MAX_VALUES then
  return {false, 'too-many-fields', #payload / 2, math.floor(MAX_VALUES / 2)}
end
local new_id = redis.call('XADD', KEYS[1], '*', unpack(payload))
return {new_id, #payload / 2, left_out}
