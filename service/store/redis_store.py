"""The Redis store: sessions shared by any number of service processes.

Data model (``P`` is the key prefix, ``S`` the session id; the braces are a Redis Cluster
hash tag, so a session lives in one slot and one script may touch all its keys):

``P:{S}:meta``       the session's metadata (JSON), written once
``P:{S}:leases``     sorted set: active chain -> lease expiry; free chains score <= now
``P:{S}:c:<k>``      hash, chain k's small hot record: ``v`` version, ``s`` state (JSON),
                     ``cv`` cold version, ``l`` lease expiry, ``a`` active, ``i`` told
                     initial value (8 bytes), ``n`` draws, ``e`` initial points told
``P:{S}:cold:<k>``   chain k's cold part (JSON), rewritten only when it changes
``P:{S}:draws:<k>``  chain k's draws, fixed-size little-endian float64 rows, appended
``P:{S}:counts``     hash: chains still in warm-up (``warming``) and done (``finished``)
``P:owner:<o>``      sorted set of owner o's session ids by creation time (the listing)

Every tell, step and ask is one call of one registered Lua script (``apply.lua``): per
chain it checks the version, writes the state, appends the draw and bumps the version,
then leases free chains; no WATCH loops. Nothing is pickled. Every key of a session
expires after the configured idle time; using the session refreshes it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Coroutine, Sequence
from importlib import resources
from typing import Any, ParamSpec, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.jsonio import loads
from service.store.base import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    SessionNotFound,
    SessionPage,
    Store,
    StoreUnavailable,
)

__all__ = ["RedisStore"]

APPLY_SCRIPT = resources.files("service.store").joinpath("apply.lua").read_text("utf-8")
P = ParamSpec("P")
T = TypeVar("T")


def _unavailable(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Turn connection failures into :class:`StoreUnavailable`."""

    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _f64(raw: bytes) -> float | None:
    return float(struct.unpack("<d", raw)[0]) if raw else None


def _record(fields: Sequence[Any]) -> ChainRecord:
    chain, version, state, cold_version, lease, active, init, draws, inits = fields
    return ChainRecord(
        chain=int(chain),
        version=int(version),
        state=bytes(state),
        cold_version=int(cold_version or 0),
        lease_until=float(lease or 0),
        active=active == b"1",
        init_value=_f64(init),
        draws=int(draws or 0),
        inits=int(inits or 0),
    )


class RedisStore(Store):
    name = "redis"

    def __init__(
        self, client: aioredis.Redis, *, prefix: str = "kameleon", ttl_seconds: int = 604800
    ) -> None:
        if not prefix or any(c in prefix for c in "{}"):
            raise ValueError("prefix must be non-empty and free of braces")
        self.client = client
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self._apply = client.register_script(APPLY_SCRIPT)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "kameleon", ttl_seconds: int = 604800
    ) -> RedisStore:
        client = aioredis.Redis.from_url(
            url,
            decode_responses=False,
            socket_timeout=10,
            socket_connect_timeout=5,
            health_check_interval=30,
            max_connections=256,
        )
        return cls(client, prefix=prefix, ttl_seconds=ttl_seconds)

    def _base(self, session_id: str) -> str:
        return f"{self.prefix}:{{{session_id}}}:"

    def _owner_key(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner or '-'}"

    def _chain_keys(self, base: str, chain: int) -> list[str]:
        return [f"{base}c:{chain}", f"{base}cold:{chain}", f"{base}draws:{chain}"]

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (RedisConnectionError, RedisTimeoutError, OSError):
            return False

    async def close(self) -> None:
        await self.client.aclose()

    @_unavailable
    async def create_session(
        self,
        session_id: str,
        owner: str,
        meta: bytes,
        chains: Sequence[ChainRecord],
        colds: Sequence[bytes],
        warming: int,
    ) -> None:
        base = self._base(session_id)
        ttl = self.ttl_seconds
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.set(base + "meta", meta, ex=ttl, nx=True)
            for record, cold in zip(chains, colds, strict=True):
                key, cold_key, draws_key = self._chain_keys(base, record.chain)
                pipe.hset(
                    key,
                    mapping={
                        "v": record.version,
                        "s": record.state,
                        "cv": record.cold_version,
                        "l": "0",
                        "a": "1" if record.active else "0",
                        "n": 0,
                        "e": 0,
                    },
                )
                pipe.expire(key, ttl)
                pipe.set(cold_key, cold, ex=ttl)
                pipe.set(draws_key, b"", ex=ttl)
            pipe.zadd(base + "leases", {str(r.chain): 0 for r in chains if r.active})
            pipe.expire(base + "leases", ttl)
            pipe.hset(base + "counts", mapping={"warming": warming, "finished": 0})
            pipe.expire(base + "counts", ttl)
            results = await pipe.execute()
        if not results[0]:
            raise ValueError(f"session {session_id} exists")
        await self.client.zadd(self._owner_key(owner), {session_id: await self._clock()})

    async def _clock(self) -> float:
        seconds, micros = await self.client.time()
        return float(seconds) + micros / 1e6

    @_unavailable
    async def get_meta(self, session_id: str) -> bytes:
        raw = await self.client.get(self._base(session_id) + "meta")
        if raw is None:
            raise SessionNotFound(session_id)
        return cast(bytes, raw)

    @_unavailable
    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        if cursor and (not cursor.isdigit() or len(cursor) > 18):
            raise ValueError("cursor is not one this store gave out")
        offset = int(cursor) if cursor else 0
        key = self._owner_key(owner)
        ids = cast(list[bytes], await self.client.zrange(key, offset, offset + limit))
        more = len(ids) > limit
        ids = ids[:limit]
        meta_keys = [self._base(i.decode()) + "meta" for i in ids]
        metas = cast(list[bytes | None], await self.client.mget(meta_keys) if ids else [])
        gone = [i for i, m in zip(ids, metas, strict=True) if m is None]
        if gone:
            await self.client.zrem(key, *gone)
        alive = [m for m in metas if m is not None]
        next_cursor = str(offset + limit - len(gone)) if more else None
        return SessionPage(alive, next_cursor)

    @_unavailable
    async def delete_session(self, session_id: str) -> None:
        base = self._base(session_id)
        raw = cast(bytes | None, await self.client.get(base + "meta"))
        if raw is None:
            raise SessionNotFound(session_id)
        chains = _meta_chains(raw)
        keys = [base + "meta", base + "leases", base + "counts"]
        for c in range(chains):
            keys += self._chain_keys(base, c)
        async with self.client.pipeline(transaction=True) as pipe:
            for start in range(0, len(keys), 1000):
                pipe.unlink(*keys[start : start + 1000])
            await pipe.execute()
        await self.client.zrem(self._owner_key(loads(raw).get("owner", "")), session_id)

    @_unavailable
    async def load_chains(self, session_id: str, chains: Sequence[int]) -> list[ChainRecord]:
        base = self._base(session_id)
        async with self.client.pipeline(transaction=False) as pipe:
            for c in chains:
                pipe.hmget(f"{base}c:{c}", "v", "s", "cv", "l", "a", "i", "n", "e")
            rows = await pipe.execute()
        out = []
        for c, row in zip(chains, rows, strict=True):
            if row[0] is None:
                raise SessionNotFound(session_id)
            out.append(_record([c, *[b"" if v is None else v for v in row]]))
        return out

    @_unavailable
    async def load_cold(self, session_id: str, chain: int) -> tuple[int, bytes]:
        key, cold_key, _ = self._chain_keys(self._base(session_id), chain)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hget(key, "cv")
            pipe.get(cold_key)
            version, cold = await pipe.execute()
        if version is None or cold is None:
            raise SessionNotFound(session_id)
        return int(version), bytes(cold)

    @_unavailable
    async def apply(
        self,
        session_id: str,
        updates: Sequence[ChainUpdate],
        *,
        lease: int = 0,
        lease_seconds: float = 0.0,
        exclude: Sequence[int] = (),
    ) -> ApplyResult:
        base = self._base(session_id)
        args: list[Any] = [base, len(updates), lease, repr(float(lease_seconds)), len(exclude)]
        args += [str(c) for c in exclude]
        for up in updates:
            args += [
                str(up.chain),
                str(up.expected_version),
                up.state,
                "1" if up.active else "0",
                up.cold if up.cold is not None else b"",
                up.draw if up.draw is not None else b"",
                struct.pack("<d", up.init_value) if up.init_value is not None else b"",
                repr(float(up.lease_seconds)),
                "1" if up.left_warmup else "0",
                "1" if up.finished else "0",
                "1" if up.init_told else "0",
            ]
        reply = await self._apply(keys=[base + "meta", base + "leases", base + "counts"], args=args)
        if int(reply[0]) != 0:
            raise SessionNotFound(session_id)
        now = float(reply[1])
        applied = frozenset(int(c) for c in reply[2])
        conflicts = {int(r[0]): _record(r) for r in reply[3]}
        leased = [_record(r) for r in reply[4]]
        return ApplyResult(applied, conflicts, leased, now, int(reply[5]), int(reply[6]))

    @_unavailable
    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        if stop <= start:
            return b""
        key = f"{self._base(session_id)}draws:{chain}"
        raw = cast(bytes, await self.client.getrange(key, start * row_bytes, stop * row_bytes - 1))
        if not raw and not await self.client.exists(key):
            raise SessionNotFound(session_id)
        return raw

    @_unavailable
    async def touch(self, session_id: str) -> None:
        base = self._base(session_id)
        raw = cast(bytes | None, await self.client.get(base + "meta"))
        if raw is None:
            raise SessionNotFound(session_id)
        keys = [base + "meta", base + "leases", base + "counts"]
        for c in range(_meta_chains(raw)):
            keys += self._chain_keys(base, c)
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.expire(key, self.ttl_seconds)
            await pipe.execute()


def _meta_chains(raw: bytes) -> int:
    return int(loads(raw)["chains"])
