-- claim: OFFERED (to anyone, to the caller, or past its deadline) -> CLAIMED by the caller,
-- at epoch + 1, or at EPOCH when the caller gives one (an external fencing token; it must
-- exceed the record's epoch).
if not EXISTS then return reply('ABSENT') end
if field('state') ~= 'OFFERED' then return reply('NOT_OFFERED') end
local target = field('target')
if target ~= '' and target ~= NAME and not expired() then return reply('NOT_OFFERED') end
local next_epoch, refused = claim_epoch()
if not next_epoch then return refused end
redis.call('HSET', OWNER, 'state', 'CLAIMED', 'owner', NAME, 'boot', BOOT,
  'epoch', num(next_epoch), 'deadline_ms', num(NOW + LEASE), 'token', TOKEN, 'token_step', STEP)
return reply('OK')
