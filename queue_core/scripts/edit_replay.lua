-- Replay a dead letter with edited fields, keeping the dead letter until the replay
-- succeeds, in one atomic step. The new entry carries the edited fields plus the
-- target-group field, the replayed-from field (the origin id, as a plain replay's), the
-- edited flag and the dead letter's id; the companion hash records "replayed as
-- <new id>, awaiting success" for the dead letter. edited_replays_settle deletes the dead
-- letter once the group has acknowledged the new entry (edit_replay_settle.lua).
--
-- KEYS[1] - the stream
-- KEYS[2] - its dead-letter stream (same cluster slot, see queue_core.keys)
-- KEYS[3] - its edited-replays hash: dead-letter id -> JSON state (same slot)
-- ARGV[1] - the dead-letter entry id
-- ARGV[2] - the reserved field prefix ('ackboard.'); edited fields may not use it
-- ARGV[3] - the target-group field name (queue_core.keys.REPLAY_GROUP_FIELD)
-- ARGV[4] - the replayed-from field name (queue_core.keys.REPLAY_OF_FIELD)
-- ARGV[5] - the edited-flag field name ('ackboard.edited')
-- ARGV[6] - the edited-from field name ('ackboard.edited-from': the dead letter's id)
-- ARGV[7] - the origin-stream field name
-- ARGV[8] - the origin-group field name
-- ARGV[9] - the origin-id field name
-- ARGV[10] - '1' to replay even though an earlier edited replay awaits success
-- ARGV[11] - the operator (recorded in the hash)
-- ARGV[12..] - the edited fields: name, value, name, value…
-- returns {new_id, group, origin_id, previous_new_id or ''} on success,
--         {false, 'not-found'} when the dead-letter entry does not exist,
--         {false, 'wrong-stream', origin_stream} when it came from another stream,
--         {false, 'no-origin'} when it has no origin group or id,
--         {false, 'no-fields'} when the edit leaves no field,
--         {false, 'reserved', name} when an edited field's name has the reserved prefix,
--         {false, 'awaiting', new_id} when an earlier edited replay of it awaits success
--           and ARGV[10] is not '1',
--         {false, 'no-group', group} when the origin group no longer exists,
--         {false, 'too-many-fields', fields, limit}; nothing is changed by a refusal.
local MAX_VALUES = 7990
local found = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #found == 0 then
  return {false, 'not-found'}
end
local fields = found[1][2]
local prefix = ARGV[2]
local meta = {}
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, #prefix) == prefix then
    meta[fields[i]] = fields[i + 1]
  end
end
local origin_stream = meta[ARGV[7]]
if origin_stream and origin_stream ~= KEYS[1] then
  return {false, 'wrong-stream', origin_stream}
end
local group = meta[ARGV[8]]
local origin_id = meta[ARGV[9]]
if not group or group == '' or not origin_id or origin_id == '' then
  return {false, 'no-origin'}
end
local payload = {}
for i = 12, #ARGV, 2 do
  if string.sub(ARGV[i], 1, #prefix) == prefix then
    return {false, 'reserved', ARGV[i]}
  end
  payload[#payload + 1] = ARGV[i]
  payload[#payload + 1] = ARGV[i + 1]
end
if #payload == 0 then
  return {false, 'no-fields'}
end
if #payload + 8 > MAX_VALUES then
  return {false, 'too-many-fields', #payload / 2, math.floor((MAX_VALUES - 8) / 2)}
end
local previous = redis.call('HGET', KEYS[3], ARGV[1])
local previous_id = ''
if previous then
  local state = cjson.decode(previous)
  previous_id = state['new_id'] or ''
  if state['state'] == 'awaiting' and ARGV[10] ~= '1' then
    return {false, 'awaiting', previous_id}
  end
end
-- O(groups): replaying into a group that is gone would leave an entry nobody handles.
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if groups.err then
  return {false, 'no-group', group}
end
local exists = false
for _, info in ipairs(groups) do
  for j = 1, #info, 2 do
    if info[j] == 'name' and info[j + 1] == group then
      exists = true
    end
  end
end
if not exists then
  return {false, 'no-group', group}
end
payload[#payload + 1] = ARGV[3]
payload[#payload + 1] = group
payload[#payload + 1] = ARGV[4]
payload[#payload + 1] = origin_id
payload[#payload + 1] = ARGV[5]
payload[#payload + 1] = '1'
payload[#payload + 1] = ARGV[6]
payload[#payload + 1] = ARGV[1]
local new_id = redis.call('XADD', KEYS[1], '*', unpack(payload))
local now = redis.call('TIME')
local at_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({
  new_id = new_id, group = group, state = 'awaiting', at_ms = at_ms,
  operator = ARGV[11], previous = previous_id,
}))
return {new_id, group, origin_id, previous_id}
