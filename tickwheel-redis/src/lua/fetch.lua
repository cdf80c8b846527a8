-- fetch (read only): chunk ARGV[7] of the offer the caller has CLAIMED.
if not held() then return fenced() end
if field('state') ~= 'CLAIMED' then return reply('STATE') end
local v = redis.call('HGET', DATA, ARGV[7])
if not v then return reply('MISSING') end
return reply('OK', v)
