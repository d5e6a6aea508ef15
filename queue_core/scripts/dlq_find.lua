-- Find the dead letters of one entry: walk the dead-letter stream from a start id, a
-- chunk at a time, up to a budget of dead letters, and return only the matches, never
-- the payloads. Read-only; the walk is O(log n + budget) and holds at most one chunk of
-- dead letters in memory at a time.
--
-- KEYS[1] - the dead-letter stream
-- ARGV[1] - the id to start from (inclusive)
-- ARGV[2] - the origin-id field name (queue_core.keys.ORIGIN_ID_FIELD)
-- ARGV[3] - the origin-group field name (queue_core.keys.ORIGIN_GROUP_FIELD)
-- ARGV[4] - the origin entry id looked for
-- ARGV[5] - the most dead letters to look at
-- ARGV[6] - dead letters read per XRANGE
-- returns {scanned, complete, last_id, group_1, dlq_id_1, group_2, dlq_id_2, ...}:
--   complete is 1 when the walk reached the end of the stream within the budget (a
--   missing key is an empty stream), last_id the last dead letter looked at ('' if none)
local budget = tonumber(ARGV[5])
local chunk = tonumber(ARGV[6])
local start = ARGV[1]
local scanned = 0
local last = ''
local found = {}
while scanned < budget do
  local want = math.min(chunk, budget - scanned)
  local items = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', want)
  for _, item in ipairs(items) do
    local fields = item[2]
    local origin, group = nil, nil
    -- The metadata is written after the original fields: walk back from the end.
    for i = #fields - 1, 1, -2 do
      local name = fields[i]
      if origin == nil and name == ARGV[2] then
        origin = fields[i + 1]
      elseif group == nil and name == ARGV[3] then
        group = fields[i + 1]
      end
      if origin ~= nil and group ~= nil then
        break
      end
    end
    if origin == ARGV[4] then
      found[#found + 1] = group or ''
      found[#found + 1] = item[1]
    end
    last = item[1]
  end
  scanned = scanned + #items
  if #items < want then
    return {scanned, 1, last, unpack(found)}
  end
  start = '(' .. last
end
return {scanned, 0, last, unpack(found)}
