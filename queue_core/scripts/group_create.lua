-- Create a consumer group at a position, with ENTRIESREAD where the server has it, so
-- XINFO GROUPS reports the right lag from the start.
--
-- ENTRIESREAD is the count of the stream's entries up to the position: from the start,
-- entries-added minus the entries left (when every deleted entry lies before the first
-- one left); at the end, entries-added; at an id, the caller's count (ARGV[4], from a
-- bounded walk), used only while max-deleted-entry-id is still the one it saw (ARGV[5]).
-- Otherwise, and on Redis 6.2 (no entries-added), it is left out: Redis then estimates
-- the lag itself or reports it unknown. Nothing is made up.
--
-- KEYS[1] - the stream
-- ARGV[1] - consumer group
-- ARGV[2] - 'start' | 'end' | 'id'
-- ARGV[3] - the last-delivered id to set (mode 'id')
-- ARGV[4] - entries read up to that id ('' = unknown; mode 'id')
-- ARGV[5] - max-deleted-entry-id when ARGV[4] was counted
-- ARGV[6] - '1' to create the stream when it does not exist (MKSTREAM)
-- returns {1, last_delivered_id, entries_read|false, lag|false} on success,
--         {false, 'no-stream'} when the key does not exist and ARGV[6] is not '1',
--         {false, 'wrong-type'} when the key is not a stream,
--         {false, 'exists'} when the group exists already

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  if ARGV[6] ~= '1' then return {false, 'no-stream'} end
elseif kind ~= 'stream' then
  return {false, 'wrong-type'}
elseif group_of(ARGV[1]) then
  return {false, 'exists'}
end

local id, read = ARGV[3], nil
if kind == 'none' then
  if ARGV[2] == 'end' then id = '$' elseif ARGV[2] == 'start' then id = '0-0' end
else
  local info = map(redis.call('XINFO', 'STREAM', KEYS[1]))
  local added = info['entries-added']
  if ARGV[2] == 'end' then
    id = info['last-generated-id']
    read = added
  elseif ARGV[2] == 'start' then
    id = '0-0'
    local first = info['first-entry']
    if added and (info['length'] == 0 or (first and idcmp(info['max-deleted-entry-id'], first[1]) < 0)) then
      read = added - info['length']
    end
  elseif added and ARGV[4] ~= '' and info['max-deleted-entry-id'] == ARGV[5] then
    read = tonumber(ARGV[4])
  end
end

local command = {'XGROUP', 'CREATE', KEYS[1], ARGV[1], id}
if kind == 'none' then table.insert(command, 'MKSTREAM') end
if read then
  table.insert(command, 'ENTRIESREAD')
  table.insert(command, string.format('%d', read))
end
redis.call(unpack(command))
local g = group_of(ARGV[1])
return {1, g['last-delivered-id'], g['entries-read'] or false, g['lag'] or false}
