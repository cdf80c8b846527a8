-- commit: CLAIMED -> OWNED; only now is the data deleted (the caller holds it).
if not held() then return fenced() end
if field('state') ~= 'CLAIMED' then return reply('STATE') end
redis.call('DEL', DATA)
redis.call('HDEL', OWNER, 'target', 'deadline_ms', 'source', 'source_boot', 'source_epoch', 'policy')
redis.call('HSET', OWNER, 'state', 'OWNED', 'chunks', '0', 'entries', '0', 'token', TOKEN, 'token_step', STEP)
return reply('OK')
