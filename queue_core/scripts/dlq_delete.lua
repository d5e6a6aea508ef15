-- Delete one dead-lettered entry, reporting where it came from (for the audit row).
--
-- KEYS[1] - the dead-letter stream
-- ARGV[1] - the dead-letter entry id
-- ARGV[2] - the origin-group field name
-- ARGV[3] - the origin-id field name
-- returns {1, origin_group, origin_id} when it was deleted ('' for a missing field),
--         {false, 'not-found'} when there is no such entry
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return {false, 'not-found'}
end
local group = ''
local origin_id = ''
local fields = found[1][2]
for i = 1, #fields, 2 do
  if fields[i] == ARGV[2] then
    group = fields[i + 1]
  elseif fields[i] == ARGV[3] then
    origin_id = fields[i + 1]
  end
end
redis.call('XDEL', KEYS[1], ARGV[1])
return {1, group, origin_id}
