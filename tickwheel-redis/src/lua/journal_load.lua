-- journal load (read only): buckets ARGV[3] .. ARGV[3] + ARGV[4] - 1, flattened
-- (id, record, id, record, ...). Answers {'OK', live records, bucket count, records} or
-- {'FENCED', current epoch or ''}.
local from, count = tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
local last = math.min(from + count, buckets()) - 1
for b = from, last do
  local all = redis.call('HGETALL', key(b))
  for j = 1, #all do out[#out + 1] = all[j] end
end
return {'OK', n, buckets(), out}
