-- Shared head of the journal's scripts. KEYS[1]: the queue's owner record, KEYS[2]: the
-- journal's meta hash (n: live records, level, split: the linear hashing state). ARGV[1]: the
-- bucket keys' common prefix (same hash tag; the bucket's decimal index is appended), ARGV[2]:
-- the writer's token, the epoch it holds. The bucket keys are not declared: they share the
-- queue's hash tag, so on Redis Cluster they live on the declared keys' slot.
local OWNER, META, BASE, TOKEN = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
-- Fenced unless the owner record's epoch is the writer's token: the check every handoff
-- step makes, made here before anything is read or written.
local current = redis.call('HGET', OWNER, 'epoch')
if current ~= TOKEN then return {'FENCED', current or ''} end

local m = redis.call('HMGET', META, 'n', 'level', 'split')
local n, level, split = tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0

-- FNV-1a over the id's bytes, 32 bits, with every product exact in Lua's doubles
-- (h * 16777619 mod 2^32 = h * 403 + (h mod 2^8) * 2^24 mod 2^32), then the high half
-- folded into the low one: the bucket is taken from the low bits.
-- Globals cost a table lookup each use: the hot ones as locals.
local bxor, byte, floor, call = bit.bxor, string.byte, math.floor, redis.call
local function h32(s)
  local h = 2166136261
  for i = 1, #s do
    h = bxor(h, byte(s, i)) % 4294967296
    h = (h * 403 + (h % 256) * 16777216) % 4294967296
  end
  return bxor(h, floor(h / 65536)) % 4294967296
end
-- Linear hashing (Litwin 1980): buckets 0 .. 2^level + split - 1; a bucket below `split`
-- has been split and is addressed with one more bit. SIZE is 2^level, kept beside it.
local SIZE = 2 ^ level
local function bucket(h)
  local b = h % SIZE
  if b < split then b = h % (SIZE * 2) end
  return b
end
-- Key names made once per script call and bucket: formatting a number costs more than the
-- HSET it names. A bucket number is an integer-valued double: Lua 5.1 prints it whole.
local names = {}
local function key(b)
  local k = names[b]
  if not k then
    k = BASE .. b
    names[b] = k
  end
  return k
end
local function buckets() return SIZE + split end
