-- Apply compare-and-set updates to chains of one session, all or nothing, then lease
-- free chains. Every key comes through KEYS, all under the session's hash tag (one Redis
-- Cluster slot); the fields of a chain's record are listed once, in redis_store.py.
--
-- KEYS[1] = meta     the session's metadata (its existence: the session exists)
-- KEYS[2] = leases   sorted set: active chain -> lease expiry (store clock, seconds)
-- KEYS[3] = counts   hash: "warming", "finished", "waiting", and "stopped_by" if stopped
-- then per update u (from 0): KEYS[4 + 3u] its chain's record (hash), KEYS[5 + 3u] its
--   cold part, KEYS[6 + 3u] its draws
-- then, optionally, KEYS[4 + 3U] = request: what the call with this request id leased
-- ARGV[1] = number of updates U
-- ARGV[2] = further chains to lease, ARGV[3] = lease seconds for those
-- ARGV[4] = number of excluded chains E, then E chain indices
-- then the U updates in one binary string, each (little-endian) a header packed as
--   UPDATE_HEADER: chain, expected version, active (1/0), lease seconds for the chain's
--   next proposal (0 = do not lease), 1 if it applies a told initial point, the changes
--   of warming, finished and waiting, the lengths of the state, the cold part (0 =
--   unchanged) and the draw row (0 = none), 1 if an init value follows; then the
--   state, cold part, draw row and init value (8 bytes) themselves (one argument, not
--   twelve per update: packing thousands of arguments cost a third of a 256-chain step)
-- then the deadline: a time on the server's clock after which the script changes
--   nothing ("" = none). A script that the server runs late (it was stalled, and the
--   caller has given up and answered that nothing changed) keeps that answer true.
--
-- Returns {status, now, applied, conflicts, leased, free, warming, finished, waiting,
-- stopped_by, replayed, next_expiry}; status 0 ok, -1 no such session, -2 past the
-- deadline (nothing changed). conflicts and leased are records {chain, <record fields>,
-- lease_until}, those in leased with an empty state (it is the state its update sent,
-- which the caller has); free is {chain, ...} of chains leased here that no update names (their
-- records are read by the caller). A stopped session's updates are applied, but nothing
-- is leased. With a request key: if the key exists (a retry), no further chain is
-- leased, and free holds the remembered chains whose lease is still the remembered one;
-- replayed is "1". Else what this call leases is remembered under the key until the
-- leases run out. next_expiry: when nothing is leased, the earliest running lease's
-- expiry ("" = none).

local FIELDS = {--[[FIELDS]]}
local UPDATE_HEADER = '--[[UPDATE_HEADER]]'

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local n_updates_given = tonumber(ARGV[1])
local deadline = ARGV[6 + tonumber(ARGV[4])]
if deadline ~= '' and now > tonumber(deadline) then
  return {-2}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local request_key = KEYS[4 + 3 * n_updates_given]
local remembered = false
if request_key then
  remembered = redis.call('GET', request_key)
end
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

local updates = {}
local blob, pos = ARGV[5 + n_exclude], 1
for u = 1, n_updates do
  local up, chain, expected, active, init_told, lengths = {}, nil, nil, nil, nil, {}
  chain, expected, active, up.lease, init_told, up.warming, up.finished, up.waiting,
    lengths[1], lengths[2], lengths[3], lengths[4], pos = struct.unpack(UPDATE_HEADER, blob, pos)
  up.chain, up.expected = string.format('%d', chain), string.format('%d', expected)
  up.active, up.init_told = (active == 1) and '1' or '0', init_told == 1
  lengths[4] = lengths[4] * 8
  local parts = {}
  for k = 1, 4 do
    parts[k] = string.sub(blob, pos, pos + lengths[k] - 1)
    pos = pos + lengths[k]
  end
  up.state, up.cold, up.draw, up.init = parts[1], parts[2], parts[3], parts[4]
  updates[u] = up
end
local stopped_by = redis.call('HGET', KEYS[3], 'stopped_by')
if stopped_by or remembered then
  extra = 0
end
local skip, updated = {}, {}
for k = 1, n_exclude do
  skip[ARGV[4 + k]] = true
end

-- Each updated chain's record is read once, here; the writes below keep these values
-- current, so that a leased chain's record is answered without reading it again.
local conflicts, current = {}, {}
for u = 0, n_updates - 1 do
  local chain, expected = updates[u + 1].chain, updates[u + 1].expected
  local r = redis.call('HMGET', KEYS[4 + 3 * u], unpack(FIELDS))
  if not r[1] then
    return {-1}
  end
  if r[1] ~= expected then
    conflicts[#conflicts + 1] = record(KEYS[4 + 3 * u], chain)
  end
  current[chain] = current[chain] or r
end
if #conflicts > 0 then
  n_updates, extra = 0, 0
end

local applied, leased = {}, {}
for u = 0, n_updates - 1 do
  local up = updates[u + 1]
  local key, cold_key, draws_key = KEYS[4 + 3 * u], KEYS[5 + 3 * u], KEYS[6 + 3 * u]
  local chain, state, active = up.chain, up.state, up.active
  local cold, draw, init, lease = up.cold, up.draw, up.init, up.lease
  skip[chain] = true
  updated[chain] = true
  local r = current[chain]  -- v, s, cv, a, i, n, e as stored (false: absent)
  local cv, n, e = tonumber(r[3] or '0'), tonumber(r[6] or '0'), tonumber(r[7] or '0')
  if cold ~= '' then
    redis.call('SET', cold_key, cold, 'KEEPTTL')
    cv = cv + 1
  end
  if draw ~= '' then
    redis.call('APPEND', draws_key, draw)
    n = n + 1
  end
  if up.init_told then
    e = e + 1
  end
  r[1] = string.format('%d', tonumber(r[1]) + 1)
  r[2], r[3], r[4] = state, string.format('%d', cv), active
  r[6], r[7] = string.format('%d', n), string.format('%d', e)
  if init == '' then
    if r[5] then
      redis.call('HDEL', key, 'i')
    end
    r[5] = false
    redis.call('HSET', key, 'v', r[1], 's', state, 'cv', r[3], 'a', active, 'n', r[6], 'e', r[7])
  else
    r[5] = init
    redis.call('HSET', key, 'v', r[1], 's', state, 'cv', r[3], 'a', active, 'i', init, 'n', r[6],
      'e', r[7])
  end
  for _, name in ipairs({'warming', 'finished', 'waiting'}) do
    if up[name] ~= 0 then
      redis.call('HINCRBY', KEYS[3], name, up[name])
    end
  end
  if active == '1' then
    local lease_until = '0'
    if lease > 0 and not stopped_by then
      lease_until = string.format('%.6f', now + lease)
    end
    redis.call('ZADD', KEYS[2], lease_until, chain)
    if lease_until ~= '0' then
      -- The record as written, without its state (the caller sent it): {chain, FIELDS
      -- with s = '', lease expiry}.
      leased[#leased + 1] = {chain, r[1], '', r[3], r[4], r[5] or '', r[6], r[7], lease_until}
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

if remembered and #conflicts == 0 then
  for pair in string.gmatch(remembered, '[^;]+') do
    local chain, until_ = string.match(pair, '^(%d+):(.+)$')
    local score = redis.call('ZSCORE', KEYS[2], chain)
    -- The same lease: equal up to the rounding of the scores (leases a microsecond
    -- apart differ by more).
    if not updated[chain] and score and math.abs(tonumber(score) - tonumber(until_)) < 5e-7
        and tonumber(until_) > now then
      free[#free + 1] = chain
    end
  end
elseif request_key and #conflicts == 0 and (#leased + #free) > 0 then
  local pairs_, latest = {}, now
  for _, r in ipairs(leased) do
    pairs_[#pairs_ + 1] = r[1] .. ':' .. string.format('%.6f', tonumber(r[#r]))
    latest = math.max(latest, tonumber(r[#r]))
  end
  for _, chain in ipairs(free) do
    pairs_[#pairs_ + 1] = chain .. ':' .. string.format('%.6f', now + extra_lease)
    latest = math.max(latest, now + extra_lease)
  end
  redis.call('SET', request_key, table.concat(pairs_, ';'), 'PX',
    math.max(1, math.ceil((latest - now) * 1000)))
end

local next_expiry = ''
if #leased + #free == 0 then
  local first_lease = redis.call('ZRANGE', KEYS[2], '(' .. string.format('%.6f', now), '+inf',
    'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #first_lease > 0 then
    next_expiry = first_lease[2]
  end
end

if ttl and ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local counts = redis.call('HMGET', KEYS[3], 'warming', 'finished', 'waiting')
local replayed = '0'
if remembered then
  replayed = '1'
end
return {0, string.format('%.6f', now), applied, conflicts, leased, free, counts[1], counts[2],
  counts[3] or '0', stopped_by or '', replayed, next_expiry}
