-- journal write: ARGV[3] the split load, ARGV[4..] a list of ops applied in order, every op
-- checked before the first write:
-- 'P' id record (put: insert or replace), 'D' id (delete), 'C' (clear every record).
-- Answers {'OK', live records} or {'FENCED', current epoch or ''} or {'BAD_OP', index}.
local LOAD = tonumber(ARGV[3])
local NARGS = #ARGV
local i = 4
while i <= NARGS do
  local op = ARGV[i]
  if op == 'P' and i + 2 <= NARGS then i = i + 3
  elseif op == 'D' and i + 1 <= NARGS then i = i + 2
  elseif op == 'C' then i = i + 1
  else return {'BAD_OP', i} end
end

-- Moves the records of bucket `split` whose next address bit is set to the new bucket
-- split + 2^level: half of one bucket, so each put does O(bucket) work at most.
local function split_one()
  local size = SIZE
  local all = redis.call('HGETALL', key(split))
  local moved, gone = {}, {}
  for j = 1, #all, 2 do
    if h32(all[j]) % (size * 2) ~= split then
      moved[#moved + 1] = all[j]
      moved[#moved + 1] = all[j + 1]
      gone[#gone + 1] = all[j]
    end
  end
  -- In slices: ids that all hash alike make one bucket as large as they are, and `unpack`
  -- of more than a few thousand values fails (a script error after some writes, not before).
  for j = 1, #gone, 500 do
    local last = math.min(j + 499, #gone)
    redis.call('HSET', key(split + size), unpack(moved, 2 * j - 1, 2 * last))
    redis.call('HDEL', key(split), unpack(gone, j, last))
  end
  split = split + 1
  if split == size then level, split, SIZE = level + 1, 0, SIZE * 2 end
end

i = 4
while i <= NARGS do
  local op = ARGV[i]
  if op == 'P' then
    local id = ARGV[i + 1]
    n = n + call('HSET', key(bucket(h32(id))), id, ARGV[i + 2])
    if n > LOAD * buckets() then split_one() end
    i = i + 3
  elseif op == 'D' then
    local id = ARGV[i + 1]
    n = n - call('HDEL', key(bucket(h32(id))), id)
    i = i + 2
  else
    for b = 0, buckets() - 1 do redis.call('DEL', key(b)) end
    n, level, split, SIZE = 0, 0, 0, 1
    i = i + 1
  end
end
-- With no record left every bucket key is gone (Redis deletes an empty hash): start over
-- at one bucket, so a queue that emptied costs nothing and loads in one step.
if n == 0 then
  redis.call('DEL', META)
else
  redis.call('HSET', META, 'n', string.format('%d', n), 'level', string.format('%d', level),
    'split', string.format('%d', split))
end
return {'OK', n}
