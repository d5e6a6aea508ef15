-- Retire one consumer, one chunk at a time: move up to ARGV[9] of its pending entries
-- (from the cursor ARGV[8]) to another consumer, then delete the consumer with XGROUP
-- DELCONSUMER, but only once it holds nothing (checked here, in the same run). A consumer
-- that still holds entries is never deleted. The caller loops over the cursor, so Redis
-- is blocked for one chunk at most.
--
-- Entries are moved with XCLAIM ... JUSTID (not a delivery: the count is unchanged).
-- Handed to a chosen consumer (ARGV[3]) they keep their idle time, so they are exactly
-- as due for reclaim as before. Made due (ARGV[3] = '') they go to the parking consumer
-- ARGV[4] with IDLE max(idle, ARGV[5]), so any live worker's next XAUTOCLAIM sweep takes
-- them. An entry whose payload was deleted is left where it is (XCLAIM would silently
-- drop it from the pending list on Redis 7), so its consumer is not deleted.
--
-- KEYS[1] - the stream
-- KEYS[2] - the group's heartbeat hash (consumer -> JSON with seen_ms)
-- ARGV[1] - consumer group
-- ARGV[2] - the consumer to retire
-- ARGV[3] - the consumer to hand the entries to ('' = make them due for reclaim)
-- ARGV[4] - the parking consumer for entries made due
-- ARGV[5] - the idle time (ms) entries made due get at least
-- ARGV[6] - now, in ms (the caller's clock, the one heartbeats are judged by)
-- ARGV[7] - a heartbeat is live while now - seen_ms <= this (ms) and it has no
--           stopped_ms (the last heartbeat of a worker that stopped is never live)
-- ARGV[8] - where this chunk starts: '-' or '(' .. the last id of the previous chunk
-- ARGV[9] - chunk size
-- returns {1, moved, payload_missing, next_cursor ('' when the pass is done), deleted (0|1),
--          held_after} on success,
--         {false, 'no-such-consumer'} when the consumer is not in the group,
--         {false, 'no-such-target'} when ARGV[3] is set, not a consumer of the group and
--           without a live heartbeat,
--         {false, 'live-heartbeat', seen_ms} when the consumer has a live heartbeat

local held = nil
local target_found = false
for _, raw in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = map(raw)
  if c['name'] == ARGV[2] then held = c['pending'] end
  if c['name'] == ARGV[3] then target_found = true end
end
if held == nil then
  return {false, 'no-such-consumer'}
end
-- The time a consumer's heartbeat was seen when it is live, else nil.
local function live_seen(name)
  local beat = redis.call('HGET', KEYS[2], name)
  if not beat then return nil end
  local ok, decoded = pcall(cjson.decode, beat)
  if ok and type(decoded) == 'table' and tonumber(decoded['seen_ms'])
      and type(decoded['stopped_ms']) ~= 'number' then
    local seen = tonumber(decoded['seen_ms'])
    if tonumber(ARGV[6]) - seen <= tonumber(ARGV[7]) then return seen end
  end
  return nil
end

-- A live worker that has received nothing yet is not in XINFO CONSUMERS on Redis 7.0
-- and 6.2; its live heartbeat makes it a valid target (XCLAIM creates the consumer).
if ARGV[3] ~= '' and not target_found and not live_seen(ARGV[3]) then
  return {false, 'no-such-target'}
end
local seen = live_seen(ARGV[2])
if seen then
  return {false, 'live-heartbeat', string.format('%d', seen)}
end

local target = ARGV[3]
if target == '' then target = ARGV[4] end
local chunk = tonumber(ARGV[9])
local page = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[8], '+', chunk, ARGV[2])
local moved, missing, last = 0, 0, ''
for _, p in ipairs(page) do
  local id, idle = p[1], p[3]
  last = id
  if #redis.call('XRANGE', KEYS[1], id, id) == 0 then
    missing = missing + 1
  else
    local set = idle
    if ARGV[3] == '' then set = math.max(idle, tonumber(ARGV[5])) end
    redis.call('XCLAIM', KEYS[1], ARGV[1], target, 0, id, 'IDLE', string.format('%d', set), 'JUSTID')
    moved = moved + 1
  end
end
local left = held - moved
if left == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return {1, moved, missing, '', 1, 0}
end
local cursor = ''
if #page == chunk then cursor = '(' .. last end
return {1, moved, missing, cursor, 0, left}
