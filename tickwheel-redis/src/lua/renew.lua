-- renew: the holder of OWNED, PREPARING or CLAIMED moves its deadline to now + lease. An
-- offer's deadline belongs to the offer: not renewable.
if not held() then return fenced() end
if field('state') == 'OFFERED' then return reply('STATE') end
-- No token is stored: a renewal repeats harmlessly, and it may run beside another call of the
-- same member (a keep-alive during an import) whose retry must still be recognised.
redis.call('HSET', OWNER, 'deadline_ms', num(NOW + LEASE))
return reply('OK')
