-- acquire: (no record) -> OWNED by the caller, epoch 1.
if not EXISTS then
  redis.call('HSET', OWNER, 'state', 'OWNED', 'owner', NAME, 'boot', BOOT, 'epoch', '1',
    'queue', QUEUE, 'token', TOKEN, 'token_step', STEP, 'chunks', '0', 'entries', '0')
  return reply('OK')
end
if field('state') == 'OWNED' and field('owner') == NAME and field('boot') == BOOT then
  return reply('REPEATED')
end
return reply('TAKEN')
