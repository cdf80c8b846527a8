-- Shared head of every step (after the line that sets STEP, the step's name). KEYS: the owner record, the chunk data and the fenced counts of
-- one queue (one hash tag). ARGV: queue name bytes, member name, boot id, token (empty for
-- reads), epoch the caller holds (empty when the step takes none), lease in ms, then the
-- step's own arguments. User data arrives only here, never in the script text.
local OWNER, DATA, FENCED = KEYS[1], KEYS[2], KEYS[3]
local QUEUE, NAME, BOOT, TOKEN, EPOCH = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local LEASE = tonumber(ARGV[6]) or 0
-- The reference clock: the server's, read inside the script so every deadline is on it.
local t = redis.call('TIME')
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Canonical decimal text for numbers stored in the record (never "1e+15").
local function num(x) return string.format('%.0f', x) end
local function field(f)
  local v = redis.call('HGET', OWNER, f)
  if v then return v end
  return ''
end
local function reply(status, extra)
  if extra == nil or extra == false then extra = '' end
  return {status, redis.call('HGETALL', OWNER), NOW, extra}
end
local EXISTS = redis.call('EXISTS', OWNER) == 1
-- A caller fenced off: the current record, and how many chunks of its epoch's offer another
-- member took (absent if none were), so it can hand back exactly the values not taken.
local function fenced()
  if not EXISTS then return reply('ABSENT') end
  return reply('FENCED', redis.call('HGET', FENCED, EPOCH))
end
-- The caller holds the record: same owner, same boot, same epoch.
local function held()
  return EXISTS and field('owner') == NAME and field('boot') == BOOT and field('epoch') == EPOCH
end
local function expired()
  local d = tonumber(field('deadline_ms'))
  return d ~= nil and NOW >= d
end
-- The epoch a claim or a reclaim takes: the record's + 1, or EPOCH when the caller gives one
-- (an external fencing token; it must exceed the record's). It, or nil and the refusal.
local function claim_epoch()
  local epoch = tonumber(field('epoch'))
  if EPOCH == '' then return epoch + 1 end
  local e = tonumber(EPOCH)
  if e == nil or e < 1 then return nil, reply('BAD_EPOCH') end
  if e <= epoch then return nil, fenced() end
  return e
end
-- The end of an offer, committed or aborted: its data and its fields go, and the record is
-- OWNED, with no chunks, under this call's token.
local function to_owned()
  redis.call('DEL', DATA)
  redis.call('HDEL', OWNER, 'target', 'deadline_ms', 'source', 'source_boot', 'source_epoch', 'policy')
  redis.call('HSET', OWNER, 'state', 'OWNED', 'chunks', '0', 'entries', '0', 'token', TOKEN, 'token_step', STEP)
  return reply('OK')
end

if EXISTS and field('queue') ~= QUEUE then return reply('OTHER_QUEUE') end
-- A retry of the last mutating call (its reply was lost): report, change nothing. The token
-- names one call of one step: the same token offered for another step does nothing either.
if EXISTS and TOKEN ~= '' and field('token') == TOKEN and field('owner') == NAME
    and field('boot') == BOOT then
  if field('token_step') ~= STEP then return reply('TOKEN_REUSED', field('token_step')) end
  return reply('REPEATED')
end
