"""One contract, every store: the in-memory store and the Redis store (real Redis)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator

import pytest

from service.store.base import (
    ChainRecord,
    ChainUpdate,
    SessionNotFound,
    Store,
    StoreUnavailable,
)
from service.store.memory_store import MemoryStore
from service.store.redis_store import RedisStore

pytestmark = pytest.mark.anyio

ROW = 16  # bytes per draw row in these tests


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        the_store: Store = MemoryStore()
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        the_store = RedisStore.from_url(url, prefix=prefix, ttl_seconds=3600)
    try:
        yield the_store
    finally:
        await the_store.close()


def _record(chain: int, state: bytes = b'{"s":0}', active: bool = True) -> ChainRecord:
    return ChainRecord(chain, 0, state, 0, 0.0, active, None, 0)


async def _create(store: Store, sid: str = "s1", chains: int = 3, owner: str = "") -> None:
    meta = b'{"id": "%s", "owner": "%s", "chains": %d}' % (sid.encode(), owner.encode(), chains)
    records = [_record(c) for c in range(chains)]
    colds = [b'{"cold": %d}' % c for c in range(chains)]
    await store.create_session(sid, owner, meta, records, colds, warming=chains)


def _update(chain: int, version: int, **kw: object) -> ChainUpdate:
    fields: dict[str, object] = {"state": b'{"s":%d}' % (version + 1), "active": True}
    fields.update(kw)
    return ChainUpdate(chain, version, **fields)  # type: ignore[arg-type]


async def test_ping(store: Store) -> None:
    assert await store.ping() is True


async def test_create_read_list_delete(store: Store) -> None:
    await _create(store, "a", owner="o1")
    await _create(store, "b", owner="o1")
    await _create(store, "c", owner="o2")
    assert b'"id": "a"' in await store.get_meta("a")
    records = await store.load_chains("a", [2, 0])
    assert [r.chain for r in records] == [2, 0]
    assert all(r.version == 0 and r.draws == 0 and r.active for r in records)
    assert await store.load_cold("a", 1) == (0, b'{"cold": 1}')
    first = await store.list_sessions("o1", None, 1)
    assert len(first.sessions) == 1 and first.next_cursor is not None
    second = await store.list_sessions("o1", first.next_cursor, 1)
    assert len(second.sessions) == 1 and second.next_cursor is None
    assert {first.sessions[0], second.sessions[0]} == {
        await store.get_meta("a"),
        await store.get_meta("b"),
    }
    assert len((await store.list_sessions("o2", None, 10)).sessions) == 1
    await store.delete_session("a")
    for call in (store.get_meta("a"), store.load_chains("a", [0]), store.touch("a")):
        with pytest.raises(SessionNotFound):
            await call
    assert len((await store.list_sessions("o1", None, 10)).sessions) == 1


async def test_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.get_meta("nope")
    with pytest.raises(SessionNotFound):
        await store.apply("nope", [_update(0, 0)])
    with pytest.raises(SessionNotFound):
        await store.delete_session("nope")


async def test_create_twice_is_refused(store: Store) -> None:
    await _create(store, "a")
    with pytest.raises(ValueError):
        await _create(store, "a")


async def test_compare_and_set_per_chain(store: Store) -> None:
    await _create(store)
    row = struct.pack("<2d", 1.5, -2.0)
    result = await store.apply(
        "s1",
        [_update(0, 0, draw=row, cold=b'{"cold": "new"}', init_value=-1.25), _update(1, 7)],
    )
    assert result.applied == {0}
    assert set(result.conflicts) == {1} and result.conflicts[1].version == 0
    rec0, rec1 = await store.load_chains("s1", [0, 1])
    assert (rec0.version, rec0.state, rec0.draws, rec0.cold_version) == (1, b'{"s":1}', 1, 1)
    assert rec0.init_value == -1.25
    assert await store.load_cold("s1", 0) == (1, b'{"cold": "new"}')
    assert rec1.version == 0 and rec1.state == b'{"s":0}'
    # no cold: the cold part and its version are kept; no draw: nothing appended
    await store.apply("s1", [_update(0, 1)])
    (rec0,) = await store.load_chains("s1", [0])
    assert (rec0.version, rec0.cold_version, rec0.draws, rec0.init_value) == (2, 1, 1, None)
    assert await store.read_draws("s1", 0, 0, 10, ROW) == row


async def test_concurrent_writers_one_wins(store: Store) -> None:
    await _create(store)
    results = await asyncio.gather(
        *[store.apply("s1", [_update(0, 0, state=b"%d" % i)]) for i in range(8)]
    )
    winners = [i for i, r in enumerate(results) if 0 in r.applied]
    assert len(winners) == 1
    (rec,) = await store.load_chains("s1", [0])
    assert rec.version == 1 and rec.state == b"%d" % winners[0]


async def test_warmup_and_finished_counts(store: Store) -> None:
    await _create(store, chains=3)
    first = await store.apply("s1", [_update(0, 0, left_warmup=True), _update(1, 0)])
    assert (first.warming, first.finished) == (2, 0)
    second = await store.apply("s1", [_update(0, 1, finished=True, active=False)])
    assert (second.warming, second.finished) == (2, 1)
    stale = await store.apply("s1", [_update(2, 5, left_warmup=True, finished=True)])
    assert (stale.warming, stale.finished) == (2, 1)  # a refused update counts nothing


async def test_draws_are_appended_and_read_in_slices(store: Store) -> None:
    await _create(store)
    rows = [struct.pack("<2d", float(i), float(-i)) for i in range(5)]
    for version, row in enumerate(rows):
        await store.apply("s1", [_update(2, version, draw=row)])
    assert await store.read_draws("s1", 2, 1, 3, ROW) == rows[1] + rows[2]
    assert await store.read_draws("s1", 2, 3, 99, ROW) == rows[3] + rows[4]
    assert await store.read_draws("s1", 2, 7, 9, ROW) == b""
    assert await store.read_draws("s1", 0, 0, 9, ROW) == b""
    (rec,) = await store.load_chains("s1", [2])
    assert rec.draws == 5


async def test_leases(store: Store) -> None:
    await _create(store, chains=4)
    first = await store.apply("s1", [], lease=2, lease_seconds=60)
    taken = {r.chain for r in first.leased}
    assert len(taken) == 2 and all(r.lease_until > first.now for r in first.leased)
    second = await store.apply("s1", [], lease=10, lease_seconds=60)
    assert {r.chain for r in second.leased} == {0, 1, 2, 3} - taken
    assert (await store.apply("s1", [], lease=10, lease_seconds=60)).leased == []


async def test_leases_run_out(store: Store) -> None:
    await _create(store, chains=2)
    first = await store.apply("s1", [], lease=2, lease_seconds=0.2)
    assert len(first.leased) == 2
    time.sleep(0.35)
    again = await store.apply("s1", [], lease=2, lease_seconds=60)
    assert {r.chain for r in again.leased} == {0, 1}
    assert {r.version for r in again.leased} == {0}  # leasing is not a state change


async def test_inactive_and_excluded_chains_are_not_leased(store: Store) -> None:
    await _create(store, chains=3)
    await store.apply("s1", [_update(0, 0, active=False)])
    result = await store.apply("s1", [], lease=3, lease_seconds=60, exclude=[1])
    assert [r.chain for r in result.leased] == [2]


async def test_update_releases_or_keeps_the_lease(store: Store) -> None:
    await _create(store, chains=2)
    await store.apply("s1", [], lease=2, lease_seconds=60)
    # answered with a re-lease: the chain's next proposal belongs to this caller
    kept = await store.apply("s1", [_update(0, 0, lease_seconds=60.0)])
    assert [r.chain for r in kept.leased] == [0] and kept.leased[0].version == 1
    # answered without one: the next proposal is free for anyone
    await store.apply("s1", [_update(1, 0)])
    free = await store.apply("s1", [], lease=2, lease_seconds=60)
    assert [r.chain for r in free.leased] == [1]


async def test_lease_and_update_in_one_call(store: Store) -> None:
    await _create(store, chains=3)
    result = await store.apply(
        "s1", [_update(0, 0, lease_seconds=30.0)], lease=1, lease_seconds=30, exclude=[0]
    )
    assert result.applied == {0}
    assert sorted(r.chain for r in result.leased) == [0, 1]


async def test_redis_keys_expire_and_share_one_hash_tag(redis_url: str, redis_prefix: str) -> None:
    import redis

    store = RedisStore.from_url(redis_url, prefix=redis_prefix, ttl_seconds=100)
    try:
        await _create(store, "tagged", chains=2)
        await store.apply("tagged", [_update(0, 0, draw=b"x" * ROW, cold=b"{}")])
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
