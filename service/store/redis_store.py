"""The Redis store: sessions shared by any number of service processes.

The data model (keys, record fields, the Lua scripts) is in
:mod:`kameleon.service.store.redis_layout`. Every tell, step and ask is one call of one
registered Lua script, which checks every updated chain's version, writes, appends and
leases in one atomic step; no WATCH loops, nothing pickled. A write that Redis runs
after its deadline changes nothing (see :meth:`RedisStore.from_url`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from kameleon.service.store.base import Store
from kameleon.service.store.records import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    Counts,
    Quota,
    QuotaExceeded,
    SessionNotes,
    SessionNotFound,
    SessionPage,
    StoreUnavailable,
)
from kameleon.service.store.redis_client import CONNECTION_RETRIES, connect
from kameleon.service.store.redis_index import (
    FORGET_SCRIPT,
    GROW_SCRIPT,
    RELEASE_SCRIPT,
    RESERVE_SCRIPT,
    TOUCH_SCRIPT,
    IndexKeys,
)
from kameleon.service.store.redis_layout import (
    APPLY_SCRIPT,
    CREATE_SCRIPT,
    DELETE_SCRIPT,
    FIELDS,
    REVISE_SCRIPT,
    SAVE_DIAGNOSTICS_SCRIPT,
    STOP_SCRIPT,
    Keys,
    pack_updates,
    record,
    unavailable,
)
from kameleon.service.store.slots import LateWrite, Slots

__all__ = ["APPLY_SCRIPT", "CONNECTION_RETRIES", "FIELDS", "Keys", "RedisStore"]


class RedisStore(Store):
    name = "redis"

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        *,
        prefix: str = "kameleon",
        ttl_seconds: int = 604800,
        timeout: float = 2.0,
        max_connections: int = 256,
    ) -> None:
        if not prefix or any(c in prefix for c in "{}"):
            raise ValueError("prefix must be non-empty and free of braces")
        self.client = client
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.timeout = timeout
        #: At most ``max_connections`` operations at once, as many as the pool has
        #: connections (per node, for a cluster); more wait up to ``timeout`` for one.
        self.slots = Slots(max_connections, timeout)
        self._clock_offset: float | None = None  # the server's clock minus ours
        self._apply = client.register_script(APPLY_SCRIPT)
        self._stop = client.register_script(STOP_SCRIPT)
        self._revise = client.register_script(REVISE_SCRIPT)
        self._save_diagnostics = client.register_script(SAVE_DIAGNOSTICS_SCRIPT)
        self._create = client.register_script(CREATE_SCRIPT)
        self._delete = client.register_script(DELETE_SCRIPT)
        self._reserve = client.register_script(RESERVE_SCRIPT)
        self._grow = client.register_script(GROW_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._touch_index = client.register_script(TOUCH_SCRIPT)
        self._forget = client.register_script(FORGET_SCRIPT)
        self.index = IndexKeys(prefix)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "kameleon",
        ttl_seconds: int = 604800,
        timeout: float = 2.0,
        max_connections: int = 256,
    ) -> RedisStore:
        """A store on the Redis at ``url`` (``redis+cluster://`` for a cluster), with the
        client of :func:`~.redis_client.connect` (its timeouts and resends)."""
        return cls(
            connect(url, timeout=timeout, max_connections=max_connections),
            prefix=prefix,
            ttl_seconds=ttl_seconds,
            timeout=timeout,
            max_connections=max_connections,
        )

    def _keys(self, session_id: str) -> Keys:
        return Keys(self.prefix, session_id)

    def _owner_key(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner or '-'}"

    async def ping(self) -> bool:
        """Whether Redis answers (``False`` too when this process is too busy to ask it
        within the timeout)."""
        try:
            return await self._ping()
        except StoreUnavailable:
            return False

    @unavailable
    async def _ping(self) -> bool:
        return bool(await self.client.ping())

    async def close(self) -> None:
        await self.client.aclose()

    @unavailable
    async def reserve(
        self,
        session_id: str,
        owner: str,
        *,
        size: int,
        grant: int,
        quota: Quota | None = None,
        token: str | None = None,
    ) -> str:
        ix = self.index
        keys = [ix.usage, ix.sessions, ix.expiry, ix.owner(owner)]
        keys.append(ix.token(owner, token) if token is not None else ix.owner(owner))
        limits = (
            ("", "", "")
            if quota is None
            else (str(quota.sessions), str(quota.bytes), str(quota.total_bytes))
        )
        args: list[str | int] = [session_id, owner, str(int(size)), str(int(grant))]
        args.append(self.ttl_seconds)
        args += [*limits, await self._deadline(), "1" if token is not None else "0"]
        reply = await self._reserve(keys=keys, args=args)
        status = int(reply[0])
        if status == -2:
            raise LateWrite("Redis ran the reservation after its deadline; nothing changed")
        if status == 1:
            return cast(bytes, reply[1]).decode()
        if status == 2:
            raise ValueError(f"session {session_id} is reserved by another owner")
        if status == 3:
            limit = cast(bytes, reply[1]).decode()
            maximum = {"sessions": limits[0], "bytes": limits[1], "total_bytes": limits[2]}
            raise QuotaExceeded(limit, int(reply[2]), int(maximum[limit]))
        return session_id

    @unavailable
    async def create_session(
        self,
        session_id: str,
        owner: str,
        meta: bytes,
        chains: Sequence[ChainRecord],
        colds: Sequence[bytes],
        warming: int,
    ) -> None:
        keys = self._keys(session_id)
        script_keys = [keys.meta, keys.leases, keys.counts]
        args: list[Any] = [await self._deadline(), self.ttl_seconds, meta, warming]
        args += [len(chains), owner]
        for rec, cold in zip(chains, colds, strict=True):
            script_keys += keys.chain(rec.chain)
            args += [rec.version, rec.state, rec.cold_version, "1" if rec.active else "0", cold]
        status = int(await self._create(keys=script_keys, args=args))
        if status == -2:
            raise LateWrite("Redis ran the create after its deadline; nothing changed")
        if status == 0:
            raise ValueError(f"session {session_id} exists")

    @unavailable
    async def grow(self, session_id: str, grant: int, size: int, quota: Quota) -> int:
        keys = [self.index.usage, self.index.sessions]
        args = [session_id, str(int(grant)), str(int(size)), str(quota.bytes)]
        args += [str(quota.total_bytes), await self._deadline()]
        reply = await self._grow(keys=keys, args=args)
        status = int(reply[0])
        if status == -2:
            raise LateWrite("Redis ran the reservation after its deadline; nothing changed")
        if status == -1:
            raise SessionNotFound(session_id)
        if status == 3:
            limit = cast(bytes, reply[1]).decode()
            maximum = quota.bytes if limit == "bytes" else quota.total_bytes
            raise QuotaExceeded(limit, int(reply[2]), maximum)
        return int(reply[1])

    async def _clock(self) -> float:
        seconds, micros = await self.client.time()
        return float(seconds) + micros / 1e6

    @unavailable
    async def get_meta(self, session_id: str) -> bytes:
        raw = await self.client.get(self._keys(session_id).meta)
        if raw is None:
            raise SessionNotFound(session_id)
        return cast(bytes, raw)

    @unavailable
    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        if cursor and (not cursor.isdigit() or len(cursor) > 18):
            raise ValueError("cursor is not one this store gave out")
        offset = int(cursor) if cursor else 0
        listing = self.index.owner(owner)
        if offset == 0:
            await self._adopt_listing(owner, listing)
        ids = cast(list[bytes], await self.client.zrange(listing, offset, offset + limit))
        more = len(ids) > limit
        ids = ids[:limit]
        # One GET per session rather than MGET: the sessions of a listing live on
        # different nodes of a cluster.
        async with self.client.pipeline(transaction=False) as pipe:
            for meta_key in (self._keys(i.decode()).meta for i in ids):
                pipe.get(meta_key)
            metas = cast(list[bytes | None], await pipe.execute() if ids else [])
        # Sessions that expired or whose create stopped half way (their reservations
        # lapse by themselves: redis_index) leave the listing; creates under way stay.
        gone = [i for i, m in zip(ids, metas, strict=True) if m is None]
        dropped = 0
        if gone:
            dropped = int(await self._forget(keys=[listing, self.index.sessions], args=gone))
        alive = [m for m in metas if m is not None]
        next_cursor = str(offset + limit - dropped) if more else None
        return SessionPage(alive, next_cursor)

    async def _adopt_listing(self, owner: str, listing: str) -> None:
        """Move a listing kept by an earlier version (``P:owner:<o>``, without the
        index's hash tag) into the index. Its sessions are listed again; they hold no
        reservation, so they count against no quota until they expire."""
        legacy = self._owner_key(owner)
        entries = cast(
            list[tuple[bytes, float]], await self.client.zrange(legacy, 0, -1, withscores=True)
        )
        if entries:
            await self.client.zadd(listing, dict(entries), nx=True)
            await self.client.delete(legacy)

    async def _session(self, keys: Keys) -> tuple[int, str | None]:
        """The session's number of chains and owner (``None``: not kept, in a session
        made before they were; then the chains are counted)."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(keys.meta)
            pipe.hmget(keys.counts, "chains", "owner")
            exists, (chains, owner) = await pipe.execute()
        if not exists:
            raise SessionNotFound(keys.base)
        if chains is not None:
            return int(chains), owner.decode() if owner is not None else None
        count = 0
        while await self.client.exists(keys.chain(count)[0]):
            count += 1
        return count, None

    @unavailable
    async def delete_session(self, session_id: str, owner: str) -> bool:
        # The reservation first (with a tombstone), then the session's keys: a delete
        # that stops in between is completed by its retry, which finds the tombstone.
        ix = self.index
        keys = [ix.usage, ix.sessions, ix.expiry, ix.owner(owner), ix.deleted(session_id)]
        args: list[str | int] = [session_id, owner, self.ttl_seconds, await self._deadline()]
        status = int((await self._release(keys=keys, args=args))[0])
        if status == -2:
            raise LateWrite("Redis ran the delete after its deadline; nothing changed")
        try:
            chains, stored_owner = await self._session(self._keys(session_id))
        except SessionNotFound:
            if status == -1:
                raise
            return status == 1
        if status == -1 and stored_owner is not None and stored_owner != owner:
            raise SessionNotFound(session_id)  # another owner's (its reservation is kept)
        every = self._keys(session_id).every(chains)
        if int(await self._delete(keys=every, args=[await self._deadline()])) == -2:
            raise LateWrite("Redis ran the delete after its deadline; retry")
        if status == -1:  # made before reservations were kept
            await self.client.zrem(self._owner_key(owner), session_id)
            await self.client.zrem(ix.owner(owner), session_id)
        return status != 0

    async def _load(self, keys: Keys, chains: Iterable[int]) -> list[ChainRecord]:
        chains = list(chains)
        async with self.client.pipeline(transaction=False) as pipe:
            for c in chains:
                pipe.hmget(keys.chain(c)[0], *FIELDS)
                pipe.zscore(keys.leases, str(c))
            replies = await pipe.execute()
        out = []
        for k, c in enumerate(chains):
            values, lease = replies[2 * k], replies[2 * k + 1]
            if values[0] is None:
                raise SessionNotFound(keys.base)
            out.append(record(c, [*values, lease]))
        return out

    @unavailable
    async def load_chains(self, session_id: str, chains: Iterable[int]) -> list[ChainRecord]:
        return await self._load(self._keys(session_id), chains)

    @unavailable
    async def load_cold(self, session_id: str, chain: int) -> tuple[int, bytes]:
        key, cold_key, _ = self._keys(session_id).chain(chain)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hget(key, "cv")
            pipe.get(cold_key)
            version, cold = await pipe.execute()
        if version is None or cold is None:
            raise SessionNotFound(session_id)
        return int(version), bytes(cold)

    @unavailable
    async def apply(
        self,
        session_id: str,
        updates: Sequence[ChainUpdate],
        *,
        lease: int = 0,
        lease_seconds: float = 0.0,
        exclude: Sequence[int] = (),
        request: str | None = None,
    ) -> ApplyResult:
        keys = self._keys(session_id)
        script_keys = [keys.meta, keys.leases, keys.counts]
        args: list[Any] = [len(updates), lease, repr(float(lease_seconds)), len(exclude)]
        args += [str(c) for c in exclude]
        for up in updates:
            script_keys += keys.chain(up.chain)
        args.append(pack_updates(updates))
        if request is not None:
            script_keys.append(keys.request(request))
        args.append(await self._deadline())
        reply = await self._apply(keys=script_keys, args=args)
        status = int(reply[0])
        if status == -2:
            raise LateWrite("Redis ran the update after its deadline; nothing changed")
        if status != 0:
            raise SessionNotFound(session_id)
        _, now, applied, conflicts, leased, free, warming, finished, waiting, stopped = reply[:10]
        replayed, next_expiry = reply[10:12]
        self._clock_offset = float(now) - time.time()
        sent = {up.chain: up.state for up in updates}  # leased records come without it
        records = [record(r[0], r[1:], state=sent[int(r[0])]) for r in leased]
        if free:
            records += await self._load(keys, [int(c) for c in free])
        return ApplyResult(
            frozenset(int(c) for c in applied),
            {int(r[0]): record(r[0], r[1:]) for r in conflicts},
            records,
            float(now),
            Counts(int(warming), int(finished), int(waiting or 0)),
            stopped_by=stopped.decode() if stopped else None,
            replayed=replayed == b"1",
            next_expiry=float(next_expiry) if next_expiry else None,
        )

    async def _deadline(self) -> str:
        """The server-clock time after which an update sent now must change nothing: a
        quarter of the timeout before the caller gives up, so that an update the server
        runs in time has that long to answer. The clocks' offset is learnt from the
        server's replies (their latency makes the deadline earlier, not later)."""
        if self._clock_offset is None:
            self._clock_offset = await self._clock() - time.time()
        return repr(time.time() + self._clock_offset + 0.75 * self.timeout)

    @unavailable
    async def stop(self, session_id: str, reason: str) -> str:
        keys = self._keys(session_id)
        reply = await self._stop(keys=[keys.meta, keys.counts], args=[reason])
        if reply is None:
            raise SessionNotFound(session_id)
        return cast(bytes, reply).decode()

    @unavailable
    async def revise(self, session_id: str, meta: bytes, revision: int) -> bool:
        keys = self._keys(session_id)
        reply = await self._revise(keys=[keys.meta, keys.counts], args=[meta, str(revision)])
        if int(reply) == -1:
            raise SessionNotFound(session_id)
        return int(reply) == 1

    @unavailable
    async def notes(self, session_id: str, *, diagnostics: bool = False) -> SessionNotes:
        keys = self._keys(session_id)
        fields = ["stopped_by", "warn"] + (["diag"] if diagnostics else [])
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(keys.meta)
            pipe.hmget(keys.counts, fields)
            exists, values = await pipe.execute()
        if not exists:
            raise SessionNotFound(session_id)
        stopped_by, warnings, *rest = values
        return SessionNotes(
            stopped_by.decode() if stopped_by else None,
            bytes(warnings) if warnings is not None else None,
            bytes(rest[0]) if rest and rest[0] is not None else None,
        )

    @unavailable
    async def save_diagnostics(
        self, session_id: str, draws: int, diagnostics: bytes, warnings: bytes
    ) -> None:
        keys = self._keys(session_id)
        reply = await self._save_diagnostics(
            keys=[keys.meta, keys.counts], args=[draws, diagnostics, warnings]
        )
        if not int(reply):
            raise SessionNotFound(session_id)

    @unavailable
    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        if stop <= start:
            return b""
        key = self._keys(session_id).chain(chain)[2]
        raw = cast(bytes, await self.client.getrange(key, start * row_bytes, stop * row_bytes - 1))
        if not raw and not await self.client.exists(key):
            raise SessionNotFound(session_id)
        return raw

    @unavailable
    async def read_draws_strided(
        self, session_id: str, chain: int, start: int, stop: int, step: int, row_bytes: int
    ) -> bytes:
        if step <= 1:
            return await self.read_draws(session_id, chain, start, stop, row_bytes)
        rows = range(start, stop, step)
        if not rows:
            return b""
        key = self._keys(session_id).chain(chain)[2]
        async with self.client.pipeline(transaction=False) as pipe:
            for row in rows:
                pipe.getrange(key, row * row_bytes, (row + 1) * row_bytes - 1)
            parts = cast(list[bytes], await pipe.execute())
        if not parts[0] and not await self.client.exists(key):
            raise SessionNotFound(session_id)
        return b"".join(parts)

    @unavailable
    async def touch(self, session_id: str) -> None:
        keys = self._keys(session_id)
        chains, _ = await self._session(keys)
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys.every(chains):
                pipe.expire(key, self.ttl_seconds)
            await pipe.execute()
        await self._touch_index(keys=[self.index.expiry], args=[session_id, self.ttl_seconds])
