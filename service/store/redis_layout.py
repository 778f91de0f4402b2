"""How the Redis store lays sessions out: keys, record fields, scripts, arguments.

Data model (``P`` is the key prefix, ``S`` the session id; the braces are a Redis Cluster
hash tag, so a session lives in one slot and one script may touch all its keys):

``P:{S}:meta``       the session's metadata (opaque bytes), written at creation and
                     replaced by each revision (``revise``)
``P:{S}:leases``     sorted set: active chain -> lease expiry; free chains score <= now
``P:{S}:c:<k>``      hash, chain k's small hot record (:data:`FIELDS`): ``v`` version,
                     ``s`` state, ``cv`` cold version, ``a`` active, ``i`` told initial
                     value (8 bytes), ``n`` draws, ``e`` initial points told; its lease
                     expiry is its score in ``leases``
``P:{S}:cold:<k>``   chain k's cold part (JSON), rewritten only when it changes
``P:{S}:draws:<k>``  chain k's draws, fixed-size little-endian float64 rows, appended
``P:{S}:counts``     hash: chains still in warm-up (``warming``), done (``finished``)
                     and waiting for a new initial point (``waiting``); why the session
                     was stopped (``stopped_by``), if it was; the latest diagnostics
                     (``diag``), their warnings (``warn``) and the total draws they were
                     computed on (``diag_draws``); the number of chains (``chains``) and
                     the owner (``owner``), so that the metadata stays opaque; the
                     metadata's revision (``revision``, absent: 0)
The listing of each owner's sessions, the quotas, idempotency keys and tombstones live in
an index of their own, under one other hash tag (:mod:`.redis_index`).

Every tell, step and ask is one call of one registered Lua script (``apply.lua``): it
checks every updated chain's version, then (all matching) writes the states, appends the
draws and bumps the versions, then leases free chains (none once the session is stopped:
``stop`` sets ``stopped_by`` in one command, which the script reads first); no WATCH
loops. Every key a script touches is passed in KEYS (computed here by :class:`Keys`), so
Redis Cluster routes and checks it. The records of free chains leased by an ask are read
in a second round trip. Nothing is pickled. Every key of a session expires after the
configured idle time; using the session refreshes it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from importlib import resources
from typing import Any

from kameleon.service.store.records import ChainRecord, ChainUpdate
from kameleon.service.store.slots import with_slot

__all__ = [
    "APPLY_SCRIPT",
    "CLUSTER_SCHEMES",
    "CREATE_SCRIPT",
    "DELETE_SCRIPT",
    "FIELDS",
    "SAVE_DIAGNOSTICS_SCRIPT",
    "STOP_SCRIPT",
    "UPDATE_HEADER",
    "Keys",
    "f64",
    "pack_updates",
    "plain_url",
    "record",
    "unavailable",
]

#: The fixed part of one update in the apply script's binary argument (``struct``
#: format, the same in Lua): chain, expected version (a double: exact to 2**53), active,
#: lease seconds, applies a told initial point, the changes of warming, finished and
#: waiting, the lengths of state, cold part and draw rows, the number of init values
#: (0 or 1, 8 bytes each) that follow them, and the number of draw rows.
UPDATE_HEADER = "<I4dBdBi4i4i4I4I4I4BI4"
_HEADER = struct.Struct("<IdBdBiiiIIIBI")


#: Fields of a chain's record hash, in the order :func:`record` reads them (the lease
#: expiry, from the ``leases`` sorted set, follows them).
FIELDS = ("v", "s", "cv", "a", "i", "n", "e")
APPLY_SCRIPT = (
    resources.files("kameleon.service.store")
    .joinpath("apply.lua")
    .read_text("utf-8")
    .replace("--[[FIELDS]]", ", ".join(f"'{f}'" for f in FIELDS))
    .replace("--[[UPDATE_HEADER]]", UPDATE_HEADER)
)
# KEYS: meta, leases, counts, then per chain k its record, cold part and draws. ARGV: the
# deadline ("" = none), seconds to live, the metadata, chains in warm-up, the number of
# chains n, the owner, then per chain its version, state, cold version, active (1/0) and
# cold part. Returns 1 stored; 0 stored already (nothing changed); -2 past the deadline.
CREATE_SCRIPT = """
local t = redis.call('TIME')
if ARGV[1] ~= '' and tonumber(t[1]) + tonumber(t[2]) / 1e6 > tonumber(ARGV[1]) then
  return -2
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local ttl = ARGV[2]
redis.call('SET', KEYS[1], ARGV[3], 'EX', ttl)
local n = tonumber(ARGV[5])
for k = 0, n - 1 do
  local a = 7 + 5 * k
  redis.call('HSET', KEYS[4 + 3 * k], 'v', ARGV[a], 's', ARGV[a + 1], 'cv', ARGV[a + 2],
    'a', ARGV[a + 3], 'n', 0, 'e', 0)
  redis.call('EXPIRE', KEYS[4 + 3 * k], ttl)
  redis.call('SET', KEYS[5 + 3 * k], ARGV[a + 4], 'EX', ttl)
  redis.call('SET', KEYS[6 + 3 * k], '', 'EX', ttl)
  if ARGV[a + 3] == '1' then redis.call('ZADD', KEYS[2], 0, k) end
end
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('HSET', KEYS[3], 'warming', ARGV[4], 'finished', 0, 'waiting', 0, 'chains', n,
  'owner', ARGV[6])
redis.call('EXPIRE', KEYS[3], ttl)
return 1
"""
# KEYS: every key of the session. ARGV: the deadline ("" = none). Returns 1, or -2 past
# the deadline (nothing changed).
DELETE_SCRIPT = """
local t = redis.call('TIME')
if ARGV[1] ~= '' and tonumber(t[1]) + tonumber(t[2]) / 1e6 > tonumber(ARGV[1]) then
  return -2
end
for i = 1, #KEYS, 1000 do
  redis.call('UNLINK', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
return 1
"""
# KEYS: meta, counts. ARGV: the reason. The reason that stands, or nil: no such session.
STOP_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
redis.call('HSETNX', KEYS[2], 'stopped_by', ARGV[1])
return redis.call('HGET', KEYS[2], 'stopped_by')
"""
# KEYS: meta, counts. ARGV: the new metadata document, its revision. 1 revised, 0 the
# stored document is not the revision before, -1 no such session.
REVISE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if tonumber(redis.call('HGET', KEYS[2], 'revision') or '0') ~= tonumber(ARGV[2]) - 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
redis.call('HSET', KEYS[2], 'revision', ARGV[2])
redis.call('HDEL', KEYS[2], 'stopped_by')
return 1
"""
# KEYS: meta, counts. ARGV: draws, diagnostics, warnings. 1, or 0: no such session.
SAVE_DIAGNOSTICS_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local kept = tonumber(redis.call('HGET', KEYS[2], 'diag_draws') or '-1')
if tonumber(ARGV[1]) >= kept then
  redis.call('HSET', KEYS[2], 'diag_draws', ARGV[1], 'diag', ARGV[2], 'warn', ARGV[3])
end
return 1
"""


#: The decorator of every operation of the Redis store: it runs in one of the store's
#: slots (at most so many operations of this process at once), and a connection failure
#: becomes :class:`StoreUnavailable` (:func:`~kameleon.service.store.slots.with_slot`).
unavailable = with_slot


def f64(raw: bytes) -> float | None:
    return float(struct.unpack("<d", raw)[0]) if raw else None


def record(chain: Any, values: Sequence[Any], state: bytes | None = None) -> ChainRecord:
    """A record from the values of :data:`FIELDS` and the lease expiry, in that order;
    ``state``, when given, instead of the one among them."""
    version, stored, cold_version, active, init, draws, inits, lease = (
        b"" if v is None else v for v in values
    )
    return ChainRecord(
        chain=int(chain),
        version=int(version),
        state=bytes(stored) if state is None else state,
        cold_version=int(cold_version or 0),
        lease_until=float(lease or 0),
        active=active == b"1",
        init_value=f64(init),
        draws=int(draws or 0),
        inits=int(inits or 0),
    )


class Keys:
    """The keys of one session: all under its hash tag, so in one Cluster slot."""

    def __init__(self, prefix: str, session_id: str) -> None:
        self.base = f"{prefix}:{{{session_id}}}:"
        self.meta = self.base + "meta"
        self.leases = self.base + "leases"
        self.counts = self.base + "counts"

    def request(self, request_id: str) -> str:
        """What the call with ``request_id`` leased (see :meth:`Store.apply`)."""
        return f"{self.base}req:{request_id}"

    def chain(self, k: int) -> tuple[str, str, str]:
        """Chain k's record, cold part and draws."""
        return f"{self.base}c:{k}", f"{self.base}cold:{k}", f"{self.base}draws:{k}"

    def every(self, chains: int) -> list[str]:
        keys = [self.meta, self.leases, self.counts]
        for k in range(chains):
            keys += self.chain(k)
        return keys


def pack_updates(updates: Sequence[ChainUpdate]) -> bytes:
    """The apply script's argument that holds ``updates`` (see ``apply.lua``)."""
    parts: list[bytes] = []
    for up in updates:
        cold = up.cold or b""
        draw = up.draw or b""
        init = b"" if up.init_value is None else struct.pack("<d", up.init_value)
        parts.append(
            _HEADER.pack(
                up.chain,
                float(up.expected_version),
                up.active,
                float(up.lease_seconds),
                up.init_told,
                up.counts.warming,
                up.counts.finished,
                up.counts.waiting,
                len(up.state),
                len(cold),
                len(draw),
                len(init) // 8,
                up.rows if draw else 0,
            )
        )
        parts += (up.state, cold, draw, init)
    return b"".join(parts)


#: URL schemes of a Redis Cluster (``redis+cluster://host:port``, with TLS
#: ``rediss+cluster://``): the client discovers the other nodes from the one named.
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def plain_url(url: str) -> str:
    """``redis+cluster://h:p/0`` -> ``redis://h:p/0``."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.removesuffix('+cluster')}://{rest}"
