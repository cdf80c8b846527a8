-- claim: OFFERED (to anyone, to the caller, or past its deadline) -> CLAIMED by the caller.
if not EXISTS then return reply('ABSENT') end
if field('state') ~= 'OFFERED' then return reply('NOT_OFFERED') end
local target = field('target')
if target ~= '' and target ~= NAME and not expired() then return reply('NOT_OFFERED') end
redis.call('HSET', OWNER, 'state', 'CLAIMED', 'owner', NAME, 'boot', BOOT,
  'epoch', num(tonumber(field('epoch')) + 1), 'deadline_ms', num(NOW + LEASE), 'token', TOKEN, 'token_step', STEP)
return reply('OK')
