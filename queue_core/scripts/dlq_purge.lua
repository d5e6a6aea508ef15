-- Empty a dead-letter stream, but only if it is still what the operator confirmed:
-- the same length and the same newest entry. Anything dead-lettered after the operator
-- looked makes the purge refuse instead of deleting entries nobody has seen.
--
-- KEYS[1] - the dead-letter stream
-- ARGV[1] - the length the operator confirmed
-- ARGV[2] - the newest entry id the operator saw ('' to skip that check)
-- returns {1, deleted} on success,
--         {false, 'changed', length, newest_id} when the stream differs from what was seen
local length = redis.call('XLEN', KEYS[1])
local newest = ''
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 1 then
  newest = last[1][1]
end
if length ~= tonumber(ARGV[1]) or (ARGV[2] ~= '' and ARGV[2] ~= newest) then
  return {false, 'changed', length, newest}
end
-- UNLINK frees a large stream in a background thread instead of blocking Redis.
redis.call('UNLINK', KEYS[1])
return {1, length}
