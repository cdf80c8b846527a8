-- adopt: the caller becomes the holder at the external epoch EPOCH (a fencing token from a
-- coordinator such as etcd), which must exceed the record's epoch. OWNED/PREPARING -> OWNED
-- (an unsealed offer is dropped: its source still holds the values); OFFERED/CLAIMED ->
-- CLAIMED by the caller (the leftover sealed offer is its to fetch and commit).
local E = tonumber(EPOCH)
if E == nil or E < 1 then return reply('BAD_EPOCH') end
if not EXISTS then
  redis.call('HSET', OWNER, 'state', 'OWNED', 'owner', NAME, 'boot', BOOT, 'epoch', num(E),
    'queue', QUEUE, 'token', TOKEN, 'token_step', STEP, 'chunks', '0', 'entries', '0')
  return reply('OK')
end
if E <= tonumber(field('epoch')) then return fenced() end
local state = field('state')
if state == 'OWNED' or state == 'PREPARING' then
  if state == 'PREPARING' then
    redis.call('DEL', DATA)
    redis.call('HSET', FENCED, field('epoch'), '0')
  end
  redis.call('HDEL', OWNER, 'target', 'deadline_ms', 'source', 'source_boot', 'source_epoch', 'policy')
  redis.call('HSET', OWNER, 'state', 'OWNED', 'chunks', '0', 'entries', '0')
else
  redis.call('HDEL', OWNER, 'target')
  redis.call('HSET', OWNER, 'state', 'CLAIMED', 'deadline_ms', num(NOW + LEASE))
end
redis.call('HSET', OWNER, 'owner', NAME, 'boot', BOOT, 'epoch', num(E), 'token', TOKEN,
  'token_step', STEP)
return reply('OK')
