-- Helpers shared by the scripts, put before each script's own source by
-- ``binding.script_source`` (every script is registered with it). Local functions only:
-- defining them costs a few closures per run, and a script that does not use one
-- ignores it. Never touches a key.
--
-- map(flat)      - a flat {k1, v1, k2, v2, ...} reply (XINFO) as a table
-- numcmp(a, b)   - compare two non-negative decimal strings of any length: -1, 0 or 1
-- idcmp(a, b)    - compare two stream ids '<ms>-<seq>' as Redis orders them: -1, 0 or 1
-- group_of(name) - the XINFO GROUPS entry of group ``name`` of KEYS[1], as a table, or nil
local function map(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function numcmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
local function idcmp(a, b)
  local am, as = a:match('^(%d+)-(%d+)$')
  local bm, bs = b:match('^(%d+)-(%d+)$')
  local c = numcmp(am, bm)
  if c ~= 0 then return c end
  return numcmp(as, bs)
end
local function group_of(name)
  for _, raw in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local g = map(raw)
    if g['name'] == name then return g end
  end
  return nil
end
