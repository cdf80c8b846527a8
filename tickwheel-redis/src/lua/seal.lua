-- seal: PREPARING -> OFFERED when ARGV[7] chunks with ARGV[8] entries are in; the offer lives
-- ARGV[9] ms before anyone may reclaim it. ARGV[10]: the queue's flow policy (empty: none),
-- stored in this same step so a sealed offer never lacks the policy it was sealed with.
if not held() then return fenced() end
if field('state') ~= 'PREPARING' then return reply('STATE') end
local n = redis.call('HLEN', DATA)
if n ~= tonumber(ARGV[7]) or field('entries') ~= ARGV[8] then return reply('COUNT', n) end
-- Whoever claims takes every chunk: a source fenced from now on gets nothing back.
redis.call('HSET', FENCED, EPOCH, num(n))
if ARGV[10] ~= nil and ARGV[10] ~= '' then
  redis.call('HSET', OWNER, 'policy', ARGV[10])
else
  redis.call('HDEL', OWNER, 'policy')
end
redis.call('HSET', OWNER, 'state', 'OFFERED', 'deadline_ms', num(NOW + tonumber(ARGV[9])),
  'token', TOKEN, 'token_step', STEP)
return reply('OK')
