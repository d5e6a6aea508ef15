-- Delete one idle consumer that holds nothing (XGROUP DELCONSUMER), re-checking in the
-- same run what the dry run showed: it is still in the group, holds no pending entry,
-- is idle at least ARGV[3] and has no live heartbeat.
--
-- "Idle" is XINFO CONSUMERS ``idle``: on Redis 7.2+ and Valkey the time since the last
-- attempted read (an empty XREADGROUP counts), so a live worker waiting on a quiet stream
-- is never idle; ``inactive`` (since the last successful read) is never smaller, so
-- requiring ``idle`` is the stricter test on every server.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's heartbeat hash (consumer -> JSON with seen_ms)
-- ARGV[1] - consumer group
-- ARGV[2] - the consumer
-- ARGV[3] - minimum idle time (ms)
-- ARGV[4] - now, in ms
-- ARGV[5] - a heartbeat is live while now - seen_ms <= this (ms) and it has no
--           stopped_ms (the last heartbeat of a worker that stopped is never live)
-- returns {1} when deleted,
--         {false, 'no-such-consumer'}, {false, 'holds-entries', pending},
--         {false, 'not-idle', idle}, {false, 'live-heartbeat', seen_ms}

local found = nil
for _, raw in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = map(raw)
  if c['name'] == ARGV[2] then found = c end
end
if found == nil then
  return {false, 'no-such-consumer'}
end
if found['pending'] ~= 0 then
  return {false, 'holds-entries', found['pending']}
end
if found['idle'] < tonumber(ARGV[3]) then
  return {false, 'not-idle', found['idle']}
end
local beat = redis.call('HGET', KEYS[2], ARGV[2])
if beat then
  local ok, decoded = pcall(cjson.decode, beat)
  if ok and type(decoded) == 'table' and tonumber(decoded['seen_ms'])
      and type(decoded['stopped_ms']) ~= 'number' then
    local seen = tonumber(decoded['seen_ms'])
    if tonumber(ARGV[4]) - seen <= tonumber(ARGV[5]) then
      return {false, 'live-heartbeat', string.format('%d', seen)}
    end
  end
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return {1}
