"""The store contract (:mod:`kameleon.service.store.contract`) on every store: the
in-memory store, Redis and a Redis Cluster (real servers); then what only Redis does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from kameleon.service.store.base import Store
from kameleon.service.store.contract import *  # noqa: F403
from kameleon.service.store.contract import ROW, create, record, update
from kameleon.service.store.memory_store import MemoryStore
from kameleon.service.store.records import Quota, QuotaExceeded, StoreUnavailable
from kameleon.service.store.redis_store import RedisStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        the_store: Store = MemoryStore()
    elif request.param == "cluster":
        # Each test has a prefix of its own; the cluster is thrown away at the end.
        url = request.getfixturevalue("redis_cluster").url
        prefix = f"contract-{uuid.uuid4().hex[:12]}"
        the_store = RedisStore.from_url(url, prefix=prefix, ttl_seconds=3600)
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        the_store = RedisStore.from_url(url, prefix=prefix, ttl_seconds=3600)
    try:
        yield the_store
    finally:
        await the_store.close()


async def test_redis_keys_expire_and_share_one_hash_tag(redis_url: str, redis_prefix: str) -> None:
    import redis

    store = RedisStore.from_url(redis_url, prefix=redis_prefix, ttl_seconds=100)
    try:
        await create(store, "tagged", chains=2)
        await store.apply("tagged", [update(0, 0, draw=b"x" * ROW, cold=b"{}")])
        await store.stop("tagged", "rule")
        await store.save_diagnostics("tagged", 1, b"{}", b"[]")
    finally:
        await store.close()
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.scan_iter(match=f"{redis_prefix}:{{tagged}}:*")]
    client.close()
    assert len(keys) == 3 + 3 * 2
    client = redis.Redis.from_url(redis_url)
    try:
        for key in keys:
            assert 0 < client.ttl(key) <= 100, key
    finally:
        client.close()


async def test_redis_unreachable_is_store_unavailable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        assert await store.ping() is False
        with pytest.raises(StoreUnavailable):
            await store.get_meta("x")
        with pytest.raises(StoreUnavailable):
            await store.apply("x", [])
    finally:
        await store.close()


async def test_redis_an_update_run_after_its_deadline_changes_nothing(
    redis_url: str, redis_prefix: str
) -> None:
    """A stalled Redis runs queued scripts when it resumes, after the caller has answered
    503 ("nothing changed"): the script checks its deadline and keeps that true."""
    store = RedisStore.from_url(redis_url, prefix=redis_prefix, ttl_seconds=100, timeout=2.0)
    try:
        await create(store, chains=2)
        store._clock_offset = -10.0  # as if the script ran 10 s after it was sent
        with pytest.raises(StoreUnavailable):
            await store.apply("s1", [update(0, 0, draw=b"x" * ROW)], lease=2, lease_seconds=9)
        store._clock_offset = None
        records = await store.load_chains("s1", [0, 1])
        assert [(r.version, r.draws, r.lease_until) for r in records] == [(0, 0, 0.0)] * 2
        assert (await store.apply("s1", [update(0, 0)])).applied == {0}
    finally:
        await store.close()


async def test_redis_scripts_take_every_key_through_keys(redis_url: str, redis_prefix: str) -> None:
    """Redis Cluster routes and checks a script by its declared keys: every key the apply
    script touches is in KEYS (per-chain keys too), all under the session's hash tag."""
    from kameleon.service.store.redis_store import APPLY_SCRIPT, Keys

    assert "ARGV[1] .." not in APPLY_SCRIPT and "'c:'" not in APPLY_SCRIPT
    store = RedisStore.from_url(redis_url, prefix=redis_prefix, ttl_seconds=100)
    calls: list[list[str]] = []
    script = store._apply

    async def spy(keys: list[str], args: list[object]) -> object:
        calls.append(keys)
        return await script(keys=keys, args=args)

    store._apply = spy  # type: ignore[assignment]
    try:
        await create(store, "tagged", chains=3)
        result = await store.apply(
            "tagged", [update(2, 0, draw=b"x" * ROW), update(0, 0)], lease=1, lease_seconds=9
        )
        await store.apply("tagged", [], lease=1, lease_seconds=9, request="r")
    finally:
        await store.close()
    keys = Keys(redis_prefix, "tagged")
    assert calls == [
        [keys.meta, keys.leases, keys.counts, *keys.chain(2), *keys.chain(0)],
        [keys.meta, keys.leases, keys.counts, keys.request("r")],
    ]
    assert all("{tagged}" in key for key in calls[0])
    assert result.applied == {0, 2} and [r.chain for r in result.leased] == [1]
    assert result.leased[0].lease_until > 0 and result.leased[0].version == 0


async def test_redis_sessions_made_before_counts_kept_their_size(
    redis_url: str, redis_prefix: str
) -> None:
    """Sessions made before the store kept the number of chains and the owner beside the
    metadata: they are touched and deleted all the same (the metadata stays opaque)."""
    import redis

    store = RedisStore.from_url(redis_url, prefix=redis_prefix, ttl_seconds=100)
    client = redis.Redis.from_url(redis_url)
    try:
        await create(store, "old", chains=2, owner="o")
        client.hdel(f"{redis_prefix}:{{old}}:counts", "chains", "owner")
        await store.touch("old")
        await store.delete_session("old", "o")
        assert list(client.scan_iter(match=f"{redis_prefix}:{{old}}:*")) == []
        assert (await store.list_sessions("o", None, 10)).sessions == []
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("kind", ["redis", "cluster"])
async def test_redis_expired_sessions_leave_the_listing_and_the_quota(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """A session whose keys expired is dropped from its owner's listing (the listing
    never fails on it) and gives its reservation back, so its owner can create again."""
    if kind == "cluster":
        url = request.getfixturevalue("redis_cluster").url
        prefix = f"contract-{uuid.uuid4().hex[:12]}"
    else:
        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    store = RedisStore.from_url(url, prefix=prefix, ttl_seconds=1)
    quota = Quota(sessions=2, bytes=1000, total_bytes=1000)
    try:
        for sid in ("e1", "e2"):
            await store.reserve(sid, "o", size=10, grant=1, quota=quota)
            await store.create_session(sid, "o", b"{}", [record(0)], [b"{}"], 1)
        with pytest.raises(QuotaExceeded):
            await store.reserve("e3", "o", size=10, grant=1, quota=quota)
        await asyncio.sleep(2.2)
        assert (await store.list_sessions("o", None, 10)).sessions == []
        await store.reserve("e3", "o", size=10, grant=1, quota=quota)
        await store.create_session("e3", "o", b"{}", [record(0)], [b"{}"], 1)
        assert len((await store.list_sessions("o", None, 10)).sessions) == 1
        await store.reserve("e4", "o", size=10, grant=1, quota=quota)  # e1, e2 gave back
    finally:
        await store.close()
