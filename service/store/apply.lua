-- Apply compare-and-set updates to chains of one session, all or nothing, then lease
-- free chains: one call per ask, tell or step. Every key comes through KEYS, all under
-- the session's hash tag (one Redis Cluster slot); the fields of a chain's record are
-- listed once, in redis_layout.py.
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
--   unchanged) and the draw rows (0 = none), 1 if an init value follows, the number of
--   draw rows; then the state, cold part, draw rows and init value (8 bytes)
--   themselves (one argument, not twelve per update: packing thousands of arguments
--   cost a third of a 256-chain step)
-- then the deadline: a time on the server's clock after which the script changes
--   nothing ("" = none). A script that the server runs late (it was stalled, and the
--   caller has given up and answered that nothing changed) keeps that answer true.
--
-- Returns {status, now, applied, conflicts, leased, free, warming, finished, waiting,
-- stopped_by, replayed, next_expiry}; status 0 ok, -1 no such session, -2 past the
-- deadline (nothing changed). conflicts and leased are records {chain, <record fields>,
-- lease_until}, those in leased with an empty state (it is the state its update sent,
-- which the caller has); free is {chain, ...} of chains leased here that no update names
-- (their records are read by the caller). A stopped session's updates are applied, but
-- nothing is leased. With a request key: if the key exists (a retry), no further chain
-- is leased, and free holds the remembered chains whose lease is still the remembered
-- one; replayed is "1". Else what this call leases is remembered under the key until
-- the leases run out. next_expiry: when nothing is leased, the earliest running lease's
-- expiry ("" = none).
--
-- The steps are the functions below, in the order the script calls them; each names
-- the KEYS and ARGV it reads or writes.

local FIELDS = {--[[FIELDS]]}
-- FIELDS but the state (the second): what a version check and a write need of a
-- record, without copying a state of many kilobytes into the script.
local BUT_STATE = {}
for k = 1, #FIELDS do
  if k ~= 2 then
    BUT_STATE[#BUT_STATE + 1] = FIELDS[k]
  end
end
local UPDATE_HEADER = '--[[UPDATE_HEADER]]'
local SESSION_KEYS = 3  -- meta, leases, counts; then three per update

local function fmt(seconds)
  return string.format('%.6f', seconds)
end

-- A chain's record as answered: {chain, FIELDS..., lease expiry}. Reads the record's
-- hash (one of KEYS[4 + 3u]) and its score in KEYS[2].
local function record(key, chain)
  local r = redis.call('HMGET', key, unpack(FIELDS))
  local out = {chain}
  for k = 1, #FIELDS do
    out[k + 1] = r[k] or ''
  end
  out[#FIELDS + 2] = redis.call('ZSCORE', KEYS[2], chain) or '0'
  return out
end

-- The U updates of ARGV[1] and the blob ARGV[5 + E], decoded; each with the keys of
-- its chain (KEYS[4 + 3u], KEYS[5 + 3u], KEYS[6 + 3u]).
local function parse_updates(n_updates, blob)
  local updates, pos = {}, 1
  for u = 1, n_updates do
    local up, chain, expected, active, init_told, lengths = {}, nil, nil, nil, nil, {}
    chain, expected, active, up.lease, init_told, up.warming, up.finished, up.waiting,
      lengths[1], lengths[2], lengths[3], lengths[4], up.rows, pos =
      struct.unpack(UPDATE_HEADER, blob, pos)
    up.chain, up.expected = string.format('%d', chain), string.format('%d', expected)
    up.active, up.init_told = (active == 1) and '1' or '0', init_told == 1
    lengths[4] = lengths[4] * 8
    local parts = {}
    for k = 1, 4 do
      parts[k] = string.sub(blob, pos, pos + lengths[k] - 1)
      pos = pos + lengths[k]
    end
    up.state, up.cold, up.draw, up.init = parts[1], parts[2], parts[3], parts[4]
    local base = SESSION_KEYS + 3 * (u - 1)
    up.key, up.cold_key, up.draws_key = KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
    updates[u] = up
  end
  return updates
end

-- Each updated chain's record, read once (from its KEYS[4 + 3u]); the conflicts: the
-- records of chains whose version is not the update's expected one. nil when a record
-- is missing (the session is gone). The writes below keep the records read here
-- current, so that a leased chain's record is answered without reading it again. The
-- state is not read (false in its place): a write replaces it, a conflict reads the
-- whole record again.
local function check_versions(updates)
  local conflicts, current = {}, {}
  for _, up in ipairs(updates) do
    local f = redis.call('HMGET', up.key, unpack(BUT_STATE))
    if not f[1] then
      return nil
    end
    local r = {f[1], false, f[2], f[3], f[4], f[5], f[6]}
    if r[1] ~= up.expected then
      conflicts[#conflicts + 1] = record(up.key, up.chain)
    end
    current[up.chain] = current[up.chain] or r
  end
  return conflicts, current
end

-- Write one update: its chain's record (KEYS[4 + 3u]), cold part (KEYS[5 + 3u]) and
-- draws (KEYS[6 + 3u]), the session's counts (KEYS[3]) and the chain's lease (KEYS[2]).
-- r is the record as read (v, s, cv, a, i, n, e; false: absent), brought up to date.
-- The answer's entry when the chain is leased (the record without its state, which the
-- caller sent), else nil.
local function write_update(up, r, now, stopped_by)
  local cv, n, e = tonumber(r[3] or '0'), tonumber(r[6] or '0'), tonumber(r[7] or '0')
  if up.cold ~= '' then
    redis.call('SET', up.cold_key, up.cold, 'KEEPTTL')
    cv = cv + 1
  end
  if up.draw ~= '' then
    redis.call('APPEND', up.draws_key, up.draw)
    n = n + up.rows
  end
  if up.init_told then
    e = e + 1
  end
  r[1] = string.format('%d', tonumber(r[1]) + 1)
  r[2], r[3], r[4] = up.state, string.format('%d', cv), up.active
  r[6], r[7] = string.format('%d', n), string.format('%d', e)
  if up.init == '' then
    if r[5] then
      redis.call('HDEL', up.key, 'i')
    end
    r[5] = false
    redis.call('HSET', up.key, 'v', r[1], 's', up.state, 'cv', r[3], 'a', up.active,
      'n', r[6], 'e', r[7])
  else
    r[5] = up.init
    redis.call('HSET', up.key, 'v', r[1], 's', up.state, 'cv', r[3], 'a', up.active,
      'i', up.init, 'n', r[6], 'e', r[7])
  end
  for _, name in ipairs({'warming', 'finished', 'waiting'}) do
    if up[name] ~= 0 then
      redis.call('HINCRBY', KEYS[3], name, up[name])
    end
  end
  if up.active ~= '1' then
    redis.call('ZREM', KEYS[2], up.chain)
    return nil
  end
  local lease_until = '0'
  if up.lease > 0 and not stopped_by then
    lease_until = fmt(now + up.lease)
  end
  redis.call('ZADD', KEYS[2], lease_until, up.chain)
  if lease_until == '0' then
    return nil
  end
  return {up.chain, r[1], '', r[3], r[4], r[5] or '', r[6], r[7], lease_until}
end

-- Lease up to extra chains of KEYS[2] whose lease has run out (the free ones, lowest
-- index first) and that skip does not name, for lease seconds each; their indices.
-- window: how many entries one range read takes beyond extra.
local function lease_free(extra, lease, skip, window, now)
  local free = {}
  local until_ = fmt(now + lease)
  local offset = 0
  while extra > 0 do
    local found = redis.call('ZRANGE', KEYS[2], '-inf', fmt(now), 'BYSCORE',
      'LIMIT', offset, extra + window)
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
  return free
end

-- A retried request (its key, KEYS[4 + 3U], holds "chain:expiry;..."): the remembered
-- chains not updated here whose lease (in KEYS[2]) is still the remembered one.
local function replayed_chains(remembered, updated, now)
  local chains = {}
  for pair in string.gmatch(remembered, '[^;]+') do
    local chain, until_ = string.match(pair, '^(%d+):(.+)$')
    local score = redis.call('ZSCORE', KEYS[2], chain)
    -- The same lease: equal up to the rounding of the scores (leases a microsecond
    -- apart differ by more).
    if not updated[chain] and score and math.abs(tonumber(score) - tonumber(until_)) < 5e-7
        and tonumber(until_) > now then
      chains[#chains + 1] = chain
    end
  end
  return chains
end

-- Remember what this request leased under its key (KEYS[4 + 3U]) until the last of
-- those leases runs out.
local function remember(request_key, leased, free, lease, now)
  local pairs_, latest = {}, now
  for _, r in ipairs(leased) do
    pairs_[#pairs_ + 1] = r[1] .. ':' .. fmt(tonumber(r[#r]))
    latest = math.max(latest, tonumber(r[#r]))
  end
  for _, chain in ipairs(free) do
    pairs_[#pairs_ + 1] = chain .. ':' .. fmt(now + lease)
    latest = math.max(latest, now + lease)
  end
  redis.call('SET', request_key, table.concat(pairs_, ';'), 'PX',
    math.max(1, math.ceil((latest - now) * 1000)))
end

-- When the first running lease of KEYS[2] runs out ('' if none runs).
local function next_expiry(now)
  local first = redis.call('ZRANGE', KEYS[2], '(' .. fmt(now), '+inf', 'BYSCORE',
    'LIMIT', 0, 1, 'WITHSCORES')
  if #first > 0 then
    return first[2]
  end
  return ''
end

-- The script.

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local n_updates = tonumber(ARGV[1])
local extra, extra_lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local n_exclude = tonumber(ARGV[4])
local deadline = ARGV[6 + n_exclude]
if deadline ~= '' and now > tonumber(deadline) then
  return {-2}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local request_key = KEYS[SESSION_KEYS + 1 + 3 * n_updates]
local remembered = false
if request_key then
  remembered = redis.call('GET', request_key)
end
local ttl = redis.call('PTTL', KEYS[1])

local updates = parse_updates(n_updates, ARGV[5 + n_exclude])
local stopped_by = redis.call('HGET', KEYS[3], 'stopped_by')
if stopped_by or remembered then
  extra = 0
end
local skip, updated = {}, {}
for k = 1, n_exclude do
  skip[ARGV[4 + k]] = true
end

local conflicts, current = check_versions(updates)
if not conflicts then
  return {-1}
end
if #conflicts > 0 then
  updates, extra = {}, 0
end

local applied, leased = {}, {}
for _, up in ipairs(updates) do
  skip[up.chain], updated[up.chain] = true, true
  local entry = write_update(up, current[up.chain], now, stopped_by)
  if entry then
    leased[#leased + 1] = entry
  end
  applied[#applied + 1] = up.chain
end

local free = {}
if extra > 0 then
  free = lease_free(extra, extra_lease, skip, n_exclude + n_updates, now)
end
if remembered and #conflicts == 0 then
  free = replayed_chains(remembered, updated, now)
elseif request_key and #conflicts == 0 and (#leased + #free) > 0 then
  remember(request_key, leased, free, extra_lease, now)
end

local first_expiry = ''
if #leased + #free == 0 then
  first_expiry = next_expiry(now)
end
if ttl and ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local counts = redis.call('HMGET', KEYS[3], 'warming', 'finished', 'waiting')
local replayed = '0'
if remembered then
  replayed = '1'
end
return {0, fmt(now), applied, conflicts, leased, free, counts[1], counts[2],
  counts[3] or '0', stopped_by or '', replayed, first_expiry}
