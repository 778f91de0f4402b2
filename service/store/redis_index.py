"""The Redis store's index of sessions: listings, quotas, idempotency keys, tombstones.

Every key here shares one hash tag, ``{index}``, so one script may read and change the
whole index atomically, also in a Redis Cluster (where it lives on one node; creates and
deletes are rare next to tells, which never touch it). ``P`` is the key prefix, ``o`` an
owner, ``S`` a session id:

``P:{index}:usage``       hash: ``n:<o>`` sessions and ``b:<o>`` bytes reserved by owner
                          o, ``total`` bytes reserved by every owner
``P:{index}:sessions``    hash: S -> ``"<bytes> <grant> <o>"``, each live reservation
``P:{index}:expiry``      sorted set: S -> when its reservation lapses (store clock);
                          refreshed with the session's keys (``touch``)
``P:{index}:owner:<o>``   sorted set: owner o's sessions by reservation time (the listing)
``P:{index}:token:<o>:<t>``  the session that owner o's create with idempotency key t made
``P:{index}:deleted:<S>`` the owner of a deleted session S, so a retried delete succeeds

A reservation (:data:`RESERVE_SCRIPT`) first gives back up to :data:`SWEEP` reservations
that lapsed (their sessions expired), then checks every limit and takes its share, all
in one script: concurrent creates in any number of processes never pass a limit
together. Every script checks a deadline as ``apply.lua`` does, so one that Redis runs
after the service gave up changes nothing.
"""

from __future__ import annotations

__all__ = [
    "FORGET_SCRIPT",
    "GROW_SCRIPT",
    "RELEASE_SCRIPT",
    "RESERVE_SCRIPT",
    "SWEEP",
    "TOUCH_SCRIPT",
    "IndexKeys",
]

#: Lapsed reservations given back by one reservation, at most (the rest by the next).
SWEEP = 100


class IndexKeys:
    """The index's keys under prefix ``P``."""

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:{{index}}:"
        self.usage = self.base + "usage"
        self.sessions = self.base + "sessions"
        self.expiry = self.base + "expiry"

    def owner(self, owner: str) -> str:
        return f"{self.base}owner:{owner or '-'}"

    def token(self, owner: str, token: str) -> str:
        return f"{self.base}token:{owner or '-'}:{token}"

    def deleted(self, session_id: str) -> str:
        return f"{self.base}deleted:{session_id}"


_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6

-- Give a reservation back (KEYS[1] usage, KEYS[2] sessions, KEYS[3] expiry); its entry.
local function release(id)
  local entry = redis.call('HGET', KEYS[2], id)
  if entry then
    local size, grant, owner = string.match(entry, '^(%d+) (%d+) (.*)$')
    redis.call('HINCRBY', KEYS[1], 'n:' .. owner, -1)
    if size ~= '0' then
      redis.call('HINCRBY', KEYS[1], 'b:' .. owner, '-' .. size)
      redis.call('HINCRBY', KEYS[1], 'total', '-' .. size)
    end
    redis.call('HDEL', KEYS[2], id)
  end
  redis.call('ZREM', KEYS[3], id)
  return entry
end

local function used(field)
  return tonumber(redis.call('HGET', KEYS[1], field) or '0')
end
"""

# KEYS: usage, sessions, expiry, the owner's listing, the token's key (or the listing
# again, unused, when there is no token). ARGV: session id, owner, bytes, grant, seconds
# the reservation lives unless refreshed, the limits of sessions, bytes and total bytes
# ("" = none), the deadline ("" = none), "1" if there is a token.
# Returns {0} reserved (or reserved already for this owner: a resent call); {1, id} the
# token's earlier session; {2} the id is another owner's; {3, limit, used} a limit would
# be passed; {-2} past the deadline.
RESERVE_SCRIPT = (
    _COMMON
    + f"""
if ARGV[9] ~= '' and now > tonumber(ARGV[9]) then return {{-2}} end
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, {SWEEP})
for _, id in ipairs(gone) do release(id) end
if ARGV[10] == '1' then
  local earlier = redis.call('GET', KEYS[5])
  if earlier and redis.call('HEXISTS', KEYS[2], earlier) == 1 then return {{1, earlier}} end
end
local id, owner, size = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = redis.call('HGET', KEYS[2], id)
if held then
  -- Reserved already: by this very call, resent after a lost answer, or another owner.
  if string.match(held, '^%d+ %d+ (.*)$') == owner then return {{0}} end
  return {{2}}
end
local n, b, total = used('n:' .. owner), used('b:' .. owner), used('total')
if ARGV[6] ~= '' and n + 1 > tonumber(ARGV[6]) then return {{3, 'sessions', n}} end
if ARGV[7] ~= '' and b + size > tonumber(ARGV[7]) then return {{3, 'bytes', b}} end
if ARGV[8] ~= '' and total + size > tonumber(ARGV[8]) then return {{3, 'total_bytes', total}} end
redis.call('HINCRBY', KEYS[1], 'n:' .. owner, 1)
if size > 0 then
  redis.call('HINCRBY', KEYS[1], 'b:' .. owner, ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'total', ARGV[3])
end
redis.call('HSET', KEYS[2], id, ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. owner)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), id)
redis.call('ZADD', KEYS[4], now, id)
if ARGV[10] == '1' then redis.call('SET', KEYS[5], id, 'EX', ARGV[5]) end
return {{0}}
"""
)

# KEYS: usage, sessions. ARGV: session id, grant, bytes per iteration added, the limits
# of the owner's bytes and of total bytes ("" = none), the deadline ("" = none).
# Returns {0, grant that stands}; {3, limit, used}; {-1} no reservation; {-2} late.
GROW_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
if ARGV[6] ~= '' and now > tonumber(ARGV[6]) then return {-2} end
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then return {-1} end
local size, grant, owner = string.match(entry, '^(%d+) (%d+) (.*)$')
local want = tonumber(ARGV[2])
if tonumber(grant) >= want then return {0, grant} end
local extra = (want - tonumber(grant)) * tonumber(ARGV[3])
local b = tonumber(redis.call('HGET', KEYS[1], 'b:' .. owner) or '0')
local total = tonumber(redis.call('HGET', KEYS[1], 'total') or '0')
if ARGV[4] ~= '' and b + extra > tonumber(ARGV[4]) then return {3, 'bytes', b} end
if ARGV[5] ~= '' and total + extra > tonumber(ARGV[5]) then return {3, 'total_bytes', total} end
local add = string.format('%d', extra)
redis.call('HINCRBY', KEYS[1], 'b:' .. owner, add)
redis.call('HINCRBY', KEYS[1], 'total', add)
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', tonumber(size) + extra) .. ' '
  .. ARGV[2] .. ' ' .. owner)
return {0, ARGV[2]}
"""

# KEYS: usage, sessions, expiry, the owner's listing, the session's tombstone. ARGV:
# session id, owner, seconds the tombstone lives, the deadline ("" = none).
# Returns {1} given back now; {0} the owner deleted it before; {-1} no reservation of the
# owner's (another owner's, or none); {-2} past the deadline.
RELEASE_SCRIPT = (
    _COMMON
    + """
if ARGV[4] ~= '' and now > tonumber(ARGV[4]) then return {-2} end
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if entry then
  local owner = string.match(entry, '^%d+ %d+ (.*)$')
  if owner ~= ARGV[2] then return {-1} end
  release(ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('SET', KEYS[5], ARGV[2], 'EX', ARGV[3])
  return {1}
end
if redis.call('GET', KEYS[5]) == ARGV[2] then return {0} end
return {-1}
"""
)

# KEYS: expiry. ARGV: session id, seconds. Refreshes a live reservation's lapse time.
TOUCH_SCRIPT = """
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], 'XX', tonumber(t[1]) + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# KEYS: an owner's listing, sessions. ARGV: ids whose metadata the listing did not find.
# Drops from the listing those that hold no reservation (expired or given back); a
# reserved one is a create under way (its metadata is stored next), and stays.
# Returns how many it dropped.
FORGET_SCRIPT = """
local dropped = 0
for _, id in ipairs(ARGV) do
  if redis.call('HEXISTS', KEYS[2], id) == 0 then
    dropped = dropped + redis.call('ZREM', KEYS[1], id)
  end
end
return dropped
"""
