-- reclaim: OFFERED, CLAIMED or PREPARING past its deadline -> CLAIMED by the caller, at
-- epoch + 1 or at the caller's EPOCH (an external fencing token above the record's epoch).
if not EXISTS then return reply('ABSENT') end
local state = field('state')
if state == 'OWNED' then return reply('STATE') end
if not expired() then return reply('NOT_EXPIRED') end
local next_epoch, refused = claim_epoch()
if not next_epoch then return refused end
if state == 'PREPARING' then
  -- The source's unsealed offer: what is in is taken, the source gets the rest back.
  local n = redis.call('HLEN', DATA)
  redis.call('HSET', FENCED, field('epoch'), num(n))
  redis.call('HSET', OWNER, 'chunks', num(n))
end
redis.call('HDEL', OWNER, 'target')
redis.call('HSET', OWNER, 'state', 'CLAIMED', 'owner', NAME, 'boot', BOOT,
  'epoch', num(next_epoch), 'deadline_ms', num(NOW + LEASE), 'token', TOKEN, 'token_step', STEP)
return reply('OK')
