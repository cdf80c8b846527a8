-- read (read only): the record, the reference clock, and fenced[ARGV[7]] if asked.
local n = ''
if ARGV[7] ~= '' then n = redis.call('HGET', FENCED, ARGV[7]) end
if not EXISTS then return reply('ABSENT', n) end
return reply('OK', n)
