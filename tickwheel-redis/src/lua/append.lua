-- append: PREPARING, chunk ARGV[7] (decimal index) = ARGV[8] (bytes) holding ARGV[9] entries.
if not held() then return fenced() end
if field('state') ~= 'PREPARING' then return reply('STATE') end
local have = redis.call('HGET', DATA, ARGV[7])
if have then
  if have == ARGV[8] then return reply('REPEATED') end
  return reply('CONFLICT')
end
local n = redis.call('HLEN', DATA)
if tonumber(ARGV[7]) ~= n then return reply('ORDER', n) end
redis.call('HSET', DATA, ARGV[7], ARGV[8])
redis.call('HSET', OWNER, 'chunks', num(n + 1),
  'entries', num(tonumber(field('entries')) + tonumber(ARGV[9])), 'token', TOKEN, 'token_step', STEP)
return reply('OK')
