-- recover: the caller's name held the record under an older boot.
if not EXISTS then return reply('ABSENT') end
if field('owner') ~= NAME then return reply('TAKEN') end
if field('boot') == BOOT then return reply('REPEATED') end
local state = field('state')
-- A sealed offer is no longer the source's: leave it for a claimer (or a reclaim).
if state == 'OFFERED' then return reply('UNCHANGED') end
if state == 'PREPARING' then
  -- The source's own copy is in its spool: the unsealed offer goes, nothing of it was taken.
  redis.call('DEL', DATA)
  redis.call('HSET', FENCED, field('epoch'), '0')
  redis.call('HDEL', OWNER, 'target', 'deadline_ms', 'source', 'source_boot', 'source_epoch', 'policy')
  redis.call('HSET', OWNER, 'state', 'OWNED', 'chunks', '0', 'entries', '0')
elseif state == 'CLAIMED' then
  redis.call('HSET', OWNER, 'deadline_ms', num(NOW + LEASE))
end
redis.call('HSET', OWNER, 'boot', BOOT, 'epoch', num(tonumber(field('epoch')) + 1), 'token', TOKEN, 'token_step', STEP)
return reply('OK')
