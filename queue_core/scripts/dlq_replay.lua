-- Put one dead-lettered entry back on its stream for its original group only, and remove
-- it from the dead-letter stream, in one atomic step. The new entry carries its original
-- fields (without Ackboard's metadata) plus a target-group field and the origin id;
-- workers of other groups acknowledge it without running their handler.
--
-- KEYS[1] - the stream
-- KEYS[2] - its dead-letter stream (same cluster slot, see queue_core.keys)
-- KEYS[3] - its edited-replays hash (queue_core.scripts.edit_replay.edits_key, same slot)
-- ARGV[1] - the dead-letter entry id
-- ARGV[2] - the reserved field prefix ('ackboard.'); such fields are not copied back
-- ARGV[3] - the target-group field name (queue_core.keys.REPLAY_GROUP_FIELD)
-- ARGV[4] - the replayed-from field name (queue_core.keys.REPLAY_OF_FIELD)
-- ARGV[5] - the origin-stream field name (queue_core.keys.ORIGIN_STREAM_FIELD)
-- ARGV[6] - the origin-group field name (queue_core.keys.ORIGIN_GROUP_FIELD)
-- ARGV[7] - the origin-id field name (queue_core.keys.ORIGIN_ID_FIELD)
-- ARGV[8] - the payload-missing field name (queue_core.keys.PAYLOAD_MISSING_FIELD)
-- returns {new_id, group, origin_id} on success,
--         {false, 'not-found'} when the dead-letter entry does not exist,
--         {false, 'edit-awaiting', new_id} when an edited replay of it still awaits
--           success (replaying the original too would run the job twice),
--         {false, 'wrong-stream', origin_stream} when it came from another stream,
--         {false, 'no-origin'} when it has no origin group or id,
--         {false, 'payload-missing'} when its original fields were lost before it
--           was dead-lettered, so there is nothing to replay,
--         {false, 'no-group', group} when the origin group no longer exists on the stream,
--         {false, 'too-many-fields', fields, limit} when the entry has more fields than
--           one XADD from a script can copy (Lua's unpack() returns at most ~8,000
--           values); nothing is changed
-- Lua 5.1's unpack() fails above ~8,000 values (LUAI_MAXCSTACK); keep a margin, the same
-- as dead_letter.lua's, so that any entry it moved can be replayed.
local MAX_VALUES = 7990
local found = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #found == 0 then
  return {false, 'not-found'}
end
-- An edited replay keeps its dead letter until the edit succeeded; only one that failed
-- again (or an unreadable record, which is refused to be safe) leaves it replayable.
local edit = redis.call('HGET', KEYS[3], ARGV[1])
if edit then
  local ok, record = pcall(cjson.decode, edit)
  if not ok or type(record) ~= 'table' or record['state'] ~= 'failed' then
    local new_id = (ok and type(record) == 'table' and record['new_id']) or ''
    return {false, 'edit-awaiting', tostring(new_id)}
  end
end
local fields = found[1][2]
local prefix = ARGV[2]
local meta = {}
local payload = {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, 1, #prefix) == prefix then
    meta[name] = fields[i + 1]
  else
    payload[#payload + 1] = name
    payload[#payload + 1] = fields[i + 1]
  end
end
local origin_stream = meta[ARGV[5]]
if origin_stream and origin_stream ~= KEYS[1] then
  return {false, 'wrong-stream', origin_stream}
end
local group = meta[ARGV[6]]
local origin_id = meta[ARGV[7]]
if not group or group == '' or not origin_id or origin_id == '' then
  return {false, 'no-origin'}
end
if meta[ARGV[8]] == '1' or #payload == 0 then
  return {false, 'payload-missing'}
end
if #payload + 4 > MAX_VALUES then
  return {false, 'too-many-fields', #payload / 2, math.floor((MAX_VALUES - 4) / 2)}
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
local new_id = redis.call('XADD', KEYS[1], '*', unpack(payload))
redis.call('XDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return {new_id, group, origin_id}
