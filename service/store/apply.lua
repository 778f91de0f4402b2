-- Apply compare-and-set updates to chains of one session, then lease free chains.
--
-- All keys of a session share the hash tag of its id, so they live in one Redis Cluster
-- slot. Per-chain keys are built here from the session's key base (ARGV[1]).
--
-- KEYS[1] = <base>meta     the session's metadata (its existence: the session exists)
-- KEYS[2] = <base>leases   sorted set: active chain -> lease expiry (store clock, seconds)
-- KEYS[3] = <base>counts   hash: chains still in warm-up ("warming") and done ("finished")
-- ARGV[1] = <base>         e.g. "kameleon:{<id>}:"
-- ARGV[2] = number of updates U
-- ARGV[3] = further chains to lease
-- ARGV[4] = lease seconds for those
-- ARGV[5] = number of excluded chains E, then E chain indices
-- then U groups of 11: chain, expected version, state, active ("1"/"0"),
--   cold ("" = unchanged), draw row ("" = none), init value ("" = none, else 8 bytes),
--   lease seconds for the chain's next proposal ("0" = do not lease),
--   "1" if the update ends the chain's warm-up, "1" if it finishes the chain,
--   "1" if it applies a told initial point
--
-- Returns {status, now, applied, conflicts, leased, warming, finished};
-- status 0 ok, -1 no such session.
-- A record is {chain, version, state, cold_version, lease_until, active, init, draws,
-- inits}.

local base = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = redis.call('PTTL', KEYS[1])

local function record(chain)
  local r = redis.call('HMGET', base .. 'c:' .. chain, 'v', 's', 'cv', 'l', 'a', 'i', 'n', 'e')
  for k = 1, 8 do
    if not r[k] then r[k] = '' end
  end
  return {tostring(chain), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
end

local n_updates = tonumber(ARGV[2])
local extra = tonumber(ARGV[3])
local extra_lease = tonumber(ARGV[4])
local n_exclude = tonumber(ARGV[5])
local skip = {}
for k = 1, n_exclude do
  skip[ARGV[5 + k]] = true
end

local applied, conflicts, leased = {}, {}, {}
local i = 6 + n_exclude
for _ = 1, n_updates do
  local chain, expected = ARGV[i], ARGV[i + 1]
  local state, active, cold, draw = ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local init, lease = ARGV[i + 6], tonumber(ARGV[i + 7])
  local left_warmup, finished, init_told = ARGV[i + 8], ARGV[i + 9], ARGV[i + 10]
  i = i + 11
  skip[chain] = true
  local key = base .. 'c:' .. chain
  local version = redis.call('HGET', key, 'v')
  if not version then
    return {-1}
  end
  if version ~= expected then
    conflicts[#conflicts + 1] = record(chain)
  else
    local lease_until = '0'
    if lease > 0 and active == '1' then
      lease_until = string.format('%.6f', now + lease)
    end
    redis.call('HSET', key, 'v', string.format('%d', tonumber(version) + 1), 's', state, 'a', active, 'l', lease_until)
    if cold ~= '' then
      redis.call('SET', base .. 'cold:' .. chain, cold, 'KEEPTTL')
      redis.call('HINCRBY', key, 'cv', 1)
    end
    if draw ~= '' then
      redis.call('APPEND', base .. 'draws:' .. chain, draw)
      redis.call('HINCRBY', key, 'n', 1)
    end
    if init == '' then
      redis.call('HDEL', key, 'i')
    else
      redis.call('HSET', key, 'i', init)
    end
    if active == '1' then
      redis.call('ZADD', KEYS[2], lease_until, chain)
    else
      redis.call('ZREM', KEYS[2], chain)
    end
    if init_told == '1' then
      redis.call('HINCRBY', key, 'e', 1)
    end
    if left_warmup == '1' then
      redis.call('HINCRBY', KEYS[3], 'warming', -1)
    end
    if finished == '1' then
      redis.call('HINCRBY', KEYS[3], 'finished', 1)
    end
    applied[#applied + 1] = chain
    if lease_until ~= '0' then
      leased[#leased + 1] = record(chain)
    end
  end
end

if extra > 0 then
  local until_ = string.format('%.6f', now + extra_lease)
  local offset = 0
  while extra > 0 do
    local free = redis.call('ZRANGE', KEYS[2], '-inf', string.format('%.6f', now), 'BYSCORE',
      'LIMIT', offset, extra + n_exclude + n_updates)
    if #free == 0 then
      break
    end
    for _, chain in ipairs(free) do
      if extra > 0 and not skip[chain] then
        redis.call('ZADD', KEYS[2], until_, chain)
        redis.call('HSET', base .. 'c:' .. chain, 'l', until_)
        leased[#leased + 1] = record(chain)
        extra = extra - 1
      else
        offset = offset + 1  -- still free, still in range: step over it next time
      end
    end
  end
end

if ttl and ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local counts = redis.call('HMGET', KEYS[3], 'warming', 'finished')
return {0, string.format('%.6f', now), applied, conflicts, leased, counts[1], counts[2]}
