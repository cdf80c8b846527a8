-- prepare: OWNED -> PREPARING. ARGV[7]: target member name or empty.
if not held() then return fenced() end
if field('state') ~= 'OWNED' then return reply('STATE') end
redis.call('DEL', DATA)
redis.call('HDEL', FENCED, EPOCH)
redis.call('HDEL', OWNER, 'policy')
redis.call('HSET', OWNER, 'state', 'PREPARING', 'deadline_ms', num(NOW + LEASE), 'chunks', '0',
  'entries', '0', 'source', NAME, 'source_boot', BOOT, 'source_epoch', EPOCH, 'token', TOKEN, 'token_step', STEP)
if ARGV[7] ~= '' then
  redis.call('HSET', OWNER, 'target', ARGV[7])
else
  redis.call('HDEL', OWNER, 'target')
end
return reply('OK')
