-- renew: the holder of OWNED, PREPARING or CLAIMED moves its deadline to now + lease. An
-- offer's deadline belongs to the offer: not renewable.
if not held() then return fenced() end
if field('state') == 'OFFERED' then return reply('STATE') end
redis.call('HSET', OWNER, 'deadline_ms', num(NOW + LEASE), 'token', TOKEN)
return reply('OK')
