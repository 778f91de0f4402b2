-- Apply compare-and-set updates to chains of one session, all or nothing, then lease
-- free chains. Every key comes through KEYS, all under the session's hash tag (one Redis
-- Cluster slot); the fields of a chain's record are listed once, in redis_store.py.
--
-- KEYS[1] = meta     the session's metadata (its existence: the session exists)
-- KEYS[2] = leases   sorted set: active chain -> lease expiry (store clock, seconds)
-- KEYS[3] = counts   hash: "warming", "finished", "waiting", and "stopped_by" if stopped
-- then per update u (from 0): KEYS[4 + 3u] its chain's record (hash), KEYS[5 + 3u] its
--   cold part, KEYS[6 + 3u] its draws
-- ARGV[1] = number of updates U
-- ARGV[2] = further chains to lease, ARGV[3] = lease seconds for those
-- ARGV[4] = number of excluded chains E, then E chain indices
-- then U groups of 12: chain, expected version, state, active ("1"/"0"),
--   cold ("" = unchanged), draw row ("" = none), init value ("" = none, else 8 bytes),
--   lease seconds for the chain's next proposal ("0" = do not lease), "1" if it applies
--   a told initial point, then the changes of warming, finished and waiting
--
-- Returns {status, now, applied, conflicts, leased, free, warming, finished, waiting,
-- stopped_by}; status 0 ok, -1 no such session. conflicts and leased are records
-- {chain, <record fields>, lease_until}; free is {chain, lease_until, ...} of chains
-- leased here that no update names (their records are read by the caller). A stopped
-- session's updates are applied, but nothing is leased.

local FIELDS = {--[[FIELDS]]}
local GROUP = 12

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = redis.call('PTTL', KEYS[1])

local function record(key, chain)
  local r = redis.call('HMGET', key, unpack(FIELDS))
  local out = {chain}
  for k = 1, #FIELDS do
    out[k + 1] = r[k] or ''
  end
  out[#FIELDS + 2] = redis.call('ZSCORE', KEYS[2], chain) or '0'
  return out
end

local n_updates = tonumber(ARGV[1])
local extra = tonumber(ARGV[2])
local extra_lease = tonumber(ARGV[3])
local n_exclude = tonumber(ARGV[4])
local first = 5 + n_exclude
local stopped_by = redis.call('HGET', KEYS[3], 'stopped_by')
if stopped_by then
  extra = 0
end
local skip = {}
for k = 1, n_exclude do
  skip[ARGV[4 + k]] = true
end

local conflicts = {}
for u = 0, n_updates - 1 do
  local chain, expected = ARGV[first + GROUP * u], ARGV[first + GROUP * u + 1]
  local version = redis.call('HGET', KEYS[4 + 3 * u], 'v')
  if not version then
    return {-1}
  end
  if version ~= expected then
    conflicts[#conflicts + 1] = record(KEYS[4 + 3 * u], chain)
  end
end
if #conflicts > 0 then
  n_updates, extra = 0, 0
end

local applied, leased = {}, {}
for u = 0, n_updates - 1 do
  local i = first + GROUP * u
  local key, cold_key, draws_key = KEYS[4 + 3 * u], KEYS[5 + 3 * u], KEYS[6 + 3 * u]
  local chain, state, active = ARGV[i], ARGV[i + 2], ARGV[i + 3]
  local cold, draw, init, lease = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], tonumber(ARGV[i + 7])
  skip[chain] = true
  redis.call('HINCRBY', key, 'v', 1)
  redis.call('HSET', key, 's', state, 'a', active)
  if cold ~= '' then
    redis.call('SET', cold_key, cold, 'KEEPTTL')
    redis.call('HINCRBY', key, 'cv', 1)
  end
  if draw ~= '' then
    redis.call('APPEND', draws_key, draw)
    redis.call('HINCRBY', key, 'n', 1)
  end
  if init == '' then
    redis.call('HDEL', key, 'i')
  else
    redis.call('HSET', key, 'i', init)
  end
  if ARGV[i + 8] == '1' then
    redis.call('HINCRBY', key, 'e', 1)
  end
  local names = {'warming', 'finished', 'waiting'}
  for k = 1, 3 do
    local change = tonumber(ARGV[i + 8 + k])
    if change ~= 0 then
      redis.call('HINCRBY', KEYS[3], names[k], change)
    end
  end
  if active == '1' then
    local lease_until = '0'
    if lease > 0 and not stopped_by then
      lease_until = string.format('%.6f', now + lease)
    end
    redis.call('ZADD', KEYS[2], lease_until, chain)
    if lease_until ~= '0' then
      leased[#leased + 1] = record(key, chain)
    end
  else
    redis.call('ZREM', KEYS[2], chain)
  end
  applied[#applied + 1] = chain
end

local free = {}
if extra > 0 then
  local until_ = string.format('%.6f', now + extra_lease)
  local offset = 0
  while extra > 0 do
    local found = redis.call('ZRANGE', KEYS[2], '-inf', string.format('%.6f', now), 'BYSCORE',
      'LIMIT', offset, extra + n_exclude + n_updates)
    if #found == 0 then
      break
    end
    for _, chain in ipairs(found) do
      if extra > 0 and not skip[chain] then
        redis.call('ZADD', KEYS[2], until_, chain)
        free[#free + 1] = chain
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
local counts = redis.call('HMGET', KEYS[3], 'warming', 'finished', 'waiting')
return {0, string.format('%.6f', now), applied, conflicts, leased, free, counts[1], counts[2],
  counts[3] or '0', stopped_by or ''}
