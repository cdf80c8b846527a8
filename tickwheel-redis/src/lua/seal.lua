-- seal: PREPARING -> OFFERED when ARGV[7] chunks with ARGV[8] entries are in; the offer lives
-- ARGV[9] ms before anyone may reclaim it.
if not held() then return fenced() end
if field('state') ~= 'PREPARING' then return reply('STATE') end
local n = redis.call('HLEN', DATA)
if n ~= tonumber(ARGV[7]) or field('entries') ~= ARGV[8] then return reply('COUNT', n) end
-- Whoever claims takes every chunk: a source fenced from now on gets nothing back.
redis.call('HSET', FENCED, EPOCH, num(n))
redis.call('HSET', OWNER, 'state', 'OFFERED', 'deadline_ms', num(NOW + tonumber(ARGV[9])),
  'token', TOKEN, 'token_step', STEP)
return reply('OK')
