-- Read the entries with the given ids from one stream (the payloads of a page of
-- pending rows): one XRANGE id id COUNT 1 per id, in one run. Reads only.
--
-- It never writes, yet has no "#!lua flags=no-writes" line: Redis 6.2 cannot load a
-- script with a shebang. Redis 7 and Valkey run a script without one as Redis 6 did,
-- checking each command it calls, so these reads run wherever a plain XRANGE would.
--
-- KEYS[1] - the stream
-- ARGV    - the entry ids
-- returns {id, {field, value, ...}, id, {field, value, ...}, ...}: the entries found,
--         in ARGV order. An id that was trimmed or deleted is absent, and so is one whose
--         XRANGE fails (a malformed id, a key that is not a stream): each failure is
--         caught here, so one id never costs the others their payloads.
local found = {}
local n = 0
for i = 1, #ARGV do
  local entry = redis.pcall('XRANGE', KEYS[1], ARGV[i], ARGV[i], 'COUNT', 1)[1]
  if entry then
    found[n + 1] = entry[1]
    found[n + 2] = entry[2]
    n = n + 2
  end
end
return found
