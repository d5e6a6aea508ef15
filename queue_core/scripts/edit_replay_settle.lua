-- Settle one edited replay (see edit_replay.lua): on success delete the dead letter and
-- its record; on a new failure mark the record "failed"; for a dead letter that is gone
-- (deleted by an operator) drop the record. Only when the record still names the replay
-- the caller checked, so a newer edited replay is never settled by an older one's outcome.
--
-- KEYS[1] - the dead-letter stream
-- KEYS[2] - the edited-replays hash
-- ARGV[1] - the dead-letter id
-- ARGV[2] - the new entry's id the caller checked
-- ARGV[3] - 'ok' (acknowledged by its group), 'failed' or 'gone'
-- ARGV[4] - for 'failed': where it failed again (its new dead letter's id, or '')
-- returns 1 when something changed, 0 when the record changed meanwhile (or is gone).
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then
  return 0
end
local state = cjson.decode(raw)
if state['new_id'] ~= ARGV[2] or state['state'] ~= 'awaiting' and ARGV[3] ~= 'gone' then
  return 0
end
if ARGV[3] == 'ok' then
  redis.call('XDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
elseif ARGV[3] == 'gone' then
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  state['state'] = 'failed'
  state['failed_as'] = ARGV[4]
  redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(state))
end
return 1
