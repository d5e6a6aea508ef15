-- Move a group's last-delivered id (XGROUP SETID ... ENTRIESREAD), guarded: refused when
-- someone moved the position since the operator's preview (ARGV[2]), and while the group
-- has live consumers unless it is paused. Live: a live heartbeat (now - seen_ms <=
-- ARGV[8], no stopped_ms) or a consumer without one seen within ARGV[9] (XINFO CONSUMERS
-- idle), unless its heartbeat says its worker stopped. A pause stops Ackboard workers
-- only, so consumers without a live heartbeat seen within ARGV[9] refuse the reset even
-- while paused.
--
-- ENTRIESREAD as in group_create.lua: exact at the start (when every deleted entry lies
-- before the first one left) and the end, the caller's count at an id while
-- max-deleted-entry-id is unchanged (ARGV[5]); else left out, never made up.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's pause key
-- KEYS[3] - the group's heartbeat hash
-- ARGV[1] - consumer group
-- ARGV[2] - the last-delivered id the preview saw
-- ARGV[3] - 'start' | 'end' | 'id'
-- ARGV[4] - the id to set (mode 'id')
-- ARGV[5] - entries read up to that id ('' = unknown; mode 'id')
-- ARGV[6] - max-deleted-entry-id when ARGV[5] was counted
-- ARGV[7] - now, in ms
-- ARGV[8] - a heartbeat is live while now - seen_ms <= this (ms) and it has no
--           stopped_ms (the last heartbeat of a worker that stopped is never live)
-- ARGV[9] - a consumer without a live heartbeat is live while its idle is below this (ms)
-- ARGV[10], ARGV[11], ARGV[12] - Ackboard's own consumer names that no worker reads as
--           (the operator's claims, the retired entries' and Retry later's parking
--           places): never live
-- returns {1, before_id, before_entries_read|false, after_id, after_entries_read|false,
--          lag|false} on success,
--         {false, 'no-group'} when there is no such group,
--         {false, 'moved', last_delivered_id} when the position is not ARGV[2] any more,
--         {false, 'live', name, ...} when not paused and consumers are live,
--         {false, 'not-pausable', name, ...} when paused and consumers without a live
--           heartbeat are live

if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {false, 'no-group'} end
local before = group_of(ARGV[1])
if before == nil then return {false, 'no-group'} end
if before['last-delivered-id'] ~= ARGV[2] then
  return {false, 'moved', before['last-delivered-id']}
end

local now, stale, within = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
-- A consumer whose last heartbeat says its worker stopped is not live either way.
local beating = {}
local stopped = {}
local live = {}
local beats = redis.call('HGETALL', KEYS[3])
for i = 1, #beats, 2 do
  local ok, decoded = pcall(cjson.decode, beats[i + 1])
  if ok and type(decoded) == 'table' and tonumber(decoded['seen_ms']) then
    if type(decoded['stopped_ms']) == 'number' then
      stopped[beats[i]] = true
    elseif now - tonumber(decoded['seen_ms']) <= stale then
      beating[beats[i]] = true
      table.insert(live, beats[i])
    end
  end
end
local unpausable = {}
for _, raw in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = map(raw)
  if not beating[c['name']] and not stopped[c['name']] and c['idle'] < within
      and c['name'] ~= ARGV[10] and c['name'] ~= ARGV[11]
      and c['name'] ~= ARGV[12] then
    table.insert(unpausable, c['name'])
    table.insert(live, c['name'])
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  if #unpausable > 0 then return {false, 'not-pausable', unpack(unpausable)} end
elseif #live > 0 then
  return {false, 'live', unpack(live)}
end

local info = map(redis.call('XINFO', 'STREAM', KEYS[1]))
local added = info['entries-added']
local id, read = ARGV[4], nil
if ARGV[3] == 'end' then
  id = info['last-generated-id']
  read = added
elseif ARGV[3] == 'start' then
  id = '0-0'
  local first = info['first-entry']
  if added and (info['length'] == 0 or (first and idcmp(info['max-deleted-entry-id'], first[1]) < 0)) then
    read = added - info['length']
  end
elseif added and ARGV[5] ~= '' and info['max-deleted-entry-id'] == ARGV[6] then
  read = tonumber(ARGV[5])
end
if read then
  redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], id, 'ENTRIESREAD', string.format('%d', read))
else
  redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], id)
end
local after = group_of(ARGV[1])
return {1, before['last-delivered-id'], before['entries-read'] or false,
        after['last-delivered-id'], after['entries-read'] or false, after['lag'] or false}
