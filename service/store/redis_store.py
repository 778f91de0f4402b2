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
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from kameleon.service.store.base import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    Counts,
    SessionNotes,
    SessionNotFound,
    SessionPage,
    Store,
    StoreUnavailable,
)
from kameleon.service.store.redis_layout import (
    APPLY_SCRIPT,
    CLUSTER_SCHEMES,
    FIELDS,
    SAVE_DIAGNOSTICS_SCRIPT,
    STOP_SCRIPT,
    Keys,
    pack_updates,
    plain_url,
    record,
    unavailable,
)

__all__ = ["APPLY_SCRIPT", "FIELDS", "Keys", "RedisStore"]


class RedisStore(Store):
    name = "redis"

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        *,
        prefix: str = "kameleon",
        ttl_seconds: int = 604800,
        timeout: float = 2.0,
    ) -> None:
        if not prefix or any(c in prefix for c in "{}"):
            raise ValueError("prefix must be non-empty and free of braces")
        self.client = client
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.timeout = timeout
        self._clock_offset: float | None = None  # the server's clock minus ours
        self._apply = client.register_script(APPLY_SCRIPT)
        self._stop = client.register_script(STOP_SCRIPT)
        self._save_diagnostics = client.register_script(SAVE_DIAGNOSTICS_SCRIPT)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "kameleon",
        ttl_seconds: int = 604800,
        timeout: float = 2.0,
    ) -> RedisStore:
        """A store on the Redis at ``url`` (``redis+cluster://`` for a cluster).

        A command that gets no answer within ``timeout`` seconds fails (and the request
        answers 503); an apply that the server runs later than that changes nothing (the
        script checks a deadline). A connection that turns out dead when a command is
        sent (the server restarted since the pool opened it) is replaced and the command
        sent again, once; a command that timed out is never sent again.
        """
        options: dict[str, Any] = {
            "decode_responses": False,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "health_check_interval": 30,
            "max_connections": 256,
        }
        client: aioredis.Redis | RedisCluster
        if url.startswith(CLUSTER_SCHEMES):
            # A Redis Cluster: every key of a session carries the session's hash tag, so
            # each script and transaction runs on the one node that serves its slot.
            client = RedisCluster.from_url(plain_url(url), **options)
        else:
            retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
            client = aioredis.Redis.from_url(url, retry=retry, **options)
        return cls(client, prefix=prefix, ttl_seconds=ttl_seconds, timeout=timeout)

    def _keys(self, session_id: str) -> Keys:
        return Keys(self.prefix, session_id)

    def _owner_key(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner or '-'}"

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (RedisConnectionError, RedisTimeoutError, OSError):
            return False

    async def close(self) -> None:
        await self.client.aclose()

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
        ttl = self.ttl_seconds
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.set(keys.meta, meta, ex=ttl, nx=True)
            for record, cold in zip(chains, colds, strict=True):
                key, cold_key, draws_key = keys.chain(record.chain)
                values: tuple[Any, ...] = (record.version, record.state, record.cold_version)
                values += ("1" if record.active else "0", None, 0, 0)
                mapping: dict[Any, Any] = {
                    f: v for f, v in zip(FIELDS, values, strict=True) if v is not None
                }
                pipe.hset(key, mapping=mapping)
                pipe.expire(key, ttl)
                pipe.set(cold_key, cold, ex=ttl)
                pipe.set(draws_key, b"", ex=ttl)
            pipe.zadd(keys.leases, {str(r.chain): 0 for r in chains if r.active})
            pipe.expire(keys.leases, ttl)
            counts: dict[Any, Any] = {"warming": warming, "finished": 0, "waiting": 0}
            pipe.hset(keys.counts, mapping={**counts, "chains": len(chains), "owner": owner})
            pipe.expire(keys.counts, ttl)
            results = await pipe.execute()
        if not results[0]:
            raise ValueError(f"session {session_id} exists")
        await self.client.zadd(self._owner_key(owner), {session_id: await self._clock()})

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
        key = self._owner_key(owner)
        ids = cast(list[bytes], await self.client.zrange(key, offset, offset + limit))
        more = len(ids) > limit
        ids = ids[:limit]
        meta_keys = [self._keys(i.decode()).meta for i in ids]
        # One GET per session rather than MGET: the sessions of a listing live on
        # different nodes of a cluster.
        async with self.client.pipeline(transaction=False) as pipe:
            for key in meta_keys:
                pipe.get(key)
            metas = cast(list[bytes | None], await pipe.execute() if ids else [])
        gone = [i for i, m in zip(ids, metas, strict=True) if m is None]
        if gone:
            await self.client.zrem(key, *gone)
        alive = [m for m in metas if m is not None]
        next_cursor = str(offset + limit - len(gone)) if more else None
        return SessionPage(alive, next_cursor)

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
    async def delete_session(self, session_id: str) -> None:
        keys = self._keys(session_id)
        chains, owner = await self._session(keys)
        every = keys.every(chains)
        async with self.client.pipeline(transaction=True) as pipe:
            for start in range(0, len(every), 1000):
                pipe.execute_command("UNLINK", *every[start : start + 1000])
            await pipe.execute()
        if owner is not None:  # else the listing drops it when it meets it
            await self.client.zrem(self._owner_key(owner), session_id)

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
            raise StoreUnavailable("Redis ran the update after its deadline; nothing changed")
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
