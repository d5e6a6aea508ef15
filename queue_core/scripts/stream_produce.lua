-- Add one entry to an existing stream (XADD *), refusing a key that does not exist
-- unless asked to create it, so a typo'd name never makes a new stream by accident.
--
-- KEYS[1] - the stream
-- ARGV[1] - '1' to create the stream when it does not exist, '' to refuse
-- ARGV[2] - the reserved field prefix ('ackboard.'); no produced field may use it
-- ARGV[3..] - the fields: name, value, name, value...
-- returns {new_id} on success,
--         {false, 'no-stream'} when the key does not exist and ARGV[1] is not '1',
--         {false, 'wrong-type', type} when the key is not a stream,
--         {false, 'no-fields'} when there is no field,
--         {false, 'reserved', name} when a field's name has the reserved prefix,
--         {false, 'too-many-fields', fields, limit}; nothing is changed by a refusal.
local MAX_VALUES = 7990
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  if ARGV[1] ~= '1' then
    return {false, 'no-stream'}
  end
elseif kind ~= 'stream' then
  return {false, 'wrong-type', kind}
end
local prefix = ARGV[2]
local payload = {}
for i = 3, #ARGV, 2 do
  if string.sub(ARGV[i], 1, #prefix) == prefix then
    return {false, 'reserved', ARGV[i]}
  end
  payload[#payload + 1] = ARGV[i]
  payload[#payload + 1] = ARGV[i + 1]
end
if #payload == 0 then
  return {false, 'no-fields'}
end
if #payload > MAX_VALUES then
  return {false, 'too-many-fields', #payload / 2, math.floor(MAX_VALUES / 2)}
end
return {redis.call('XADD', KEYS[1], '*', unpack(payload))}
