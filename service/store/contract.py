"""The store contract: what every :class:`~kameleon.service.store.base.Store` must do,
as pytest tests that a backend's own test module runs against its store.

A new backend's tests need only a ``store`` fixture that yields a fresh store (each
test creates its own sessions, named ``s1``, ``a``, ...), and this module's tests::

    from kameleon.service.store.contract import *  # noqa: F403

    @pytest.fixture
    async def store() -> AsyncIterator[Store]:
        the_store = MyStore(...)
        yield the_store
        await the_store.close()

The tests are coroutines run by anyio's pytest plugin (the ``anyio_backend`` fixture
below picks asyncio). Each uses only the :class:`Store` interface, so a backend passes
them or has a defect; ``tests/service/test_store_contract.py`` runs them on the memory
store, Redis and a Redis Cluster.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import pytest

from kameleon.service.store.base import Store
from kameleon.service.store.records import (
    ChainRecord,
    ChainUpdate,
    Counts,
    Quota,
    QuotaExceeded,
    SessionNotFound,
)

__all__ = [
    "QUOTA",
    "ROW",
    "anyio_backend",
    "create",
    "create_reserved",
    "record",
    "reserve",
    "update",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


ROW = 16  # bytes per draw row in these tests


def record(chain: int, state: bytes = b'{"s":0}', active: bool = True) -> ChainRecord:
    """A new chain's record, as a create stores it."""
    return ChainRecord(chain, 0, state, 0, 0.0, active, None, 0)


async def create(store: Store, sid: str = "s1", chains: int = 3, owner: str = "") -> None:
    """Reserve (no quota) and create session ``sid`` of ``chains`` chains."""
    meta = b'{"id": "%s", "owner": "%s", "chains": %d}' % (sid.encode(), owner.encode(), chains)
    records = [record(c) for c in range(chains)]
    colds = [b'{"cold": %d}' % c for c in range(chains)]
    assert await store.reserve(sid, owner, size=0, grant=0) == sid
    await store.create_session(sid, owner, meta, records, colds, warming=chains)


def update(chain: int, version: int, **kw: object) -> ChainUpdate:
    """An update of ``chain`` from ``version`` (a new state; ``kw`` sets the rest)."""
    fields: dict[str, object] = {"state": b'{"s":%d}' % (version + 1), "active": True}
    fields.update(kw)
    return ChainUpdate(chain, version, **fields)  # type: ignore[arg-type]


async def test_ping(store: Store) -> None:
    assert await store.ping() is True


async def test_create_read_list_delete(store: Store) -> None:
    await create(store, "a", owner="o1")
    await create(store, "b", owner="o1")
    await create(store, "c", owner="o2")
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
    assert await store.delete_session("a", "o1") is True
    for call in (store.get_meta("a"), store.load_chains("a", [0]), store.touch("a")):
        with pytest.raises(SessionNotFound):
            await call
    assert len((await store.list_sessions("o1", None, 10)).sessions) == 1


async def test_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.get_meta("nope")
    with pytest.raises(SessionNotFound):
        await store.apply("nope", [update(0, 0)])
    with pytest.raises(SessionNotFound):
        await store.delete_session("nope", "")


async def test_create_twice_is_refused(store: Store) -> None:
    await create(store, "a")
    with pytest.raises(ValueError):
        await create(store, "a")


async def test_compare_and_set_all_or_nothing(store: Store) -> None:
    await create(store)
    row = struct.pack("<2d", 1.5, -2.0)
    good = update(0, 0, draw=row, cold=b'{"cold": "new"}', init_value=-1.25)
    # One stale update: nothing is written, nothing leased, and its chain's record is told.
    result = await store.apply("s1", [good, update(1, 7)], lease=1, lease_seconds=30)
    assert result.applied == frozenset() and result.leased == []
    assert set(result.conflicts) == {1} and result.conflicts[1].version == 0
    assert [r.version for r in await store.load_chains("s1", [0, 1, 2])] == [0, 0, 0]
    assert await store.read_draws("s1", 0, 0, 10, ROW) == b""
    assert await store.load_cold("s1", 0) == (0, b'{"cold": 0}')
    result = await store.apply("s1", [good])
    assert result.applied == {0} and not result.conflicts
    rec0, rec1 = await store.load_chains("s1", [0, 1])
    assert (rec0.version, rec0.state, rec0.draws, rec0.cold_version) == (1, b'{"s":1}', 1, 1)
    assert rec0.init_value == -1.25
    assert await store.load_cold("s1", 0) == (1, b'{"cold": "new"}')
    assert rec1.version == 0 and rec1.state == b'{"s":0}'
    # no cold: the cold part and its version are kept; no draw: nothing appended
    await store.apply("s1", [update(0, 1)])
    (rec0,) = await store.load_chains("s1", [0])
    assert (rec0.version, rec0.cold_version, rec0.draws, rec0.init_value) == (2, 1, 1, None)
    assert await store.read_draws("s1", 0, 0, 10, ROW) == row


async def test_concurrent_writers_one_wins(store: Store) -> None:
    await create(store)
    results = await asyncio.gather(
        *[store.apply("s1", [update(0, 0, state=b"%d" % i)]) for i in range(8)]
    )
    winners = [i for i, r in enumerate(results) if 0 in r.applied]
    assert len(winners) == 1
    (rec,) = await store.load_chains("s1", [0])
    assert rec.version == 1 and rec.state == b"%d" % winners[0]


async def test_warmup_and_finished_counts(store: Store) -> None:
    await create(store, chains=3)
    first = await store.apply("s1", [update(0, 0, counts=Counts(warming=-1)), update(1, 0)])
    assert first.counts == Counts(2, 0, 0)
    second = await store.apply("s1", [update(0, 1, counts=Counts(finished=1), active=False)])
    assert second.counts == Counts(2, 1, 0)
    stale = await store.apply("s1", [update(2, 5, counts=Counts(warming=-1, finished=1))])
    assert stale.counts == Counts(2, 1, 0)  # a refused update counts nothing


async def test_waiting_count(store: Store) -> None:
    await create(store, chains=3)
    wait, unwait = Counts(waiting=1), Counts(waiting=-1)
    first = await store.apply("s1", [update(0, 0, counts=wait, active=False), update(1, 0)])
    assert first.counts.waiting == 1
    second = await store.apply("s1", [update(2, 0, counts=wait, active=False)])
    assert second.counts.waiting == 2
    stale = await store.apply("s1", [update(0, 0, counts=unwait)])
    assert stale.counts.waiting == 2  # a refused update counts nothing
    third = await store.apply("s1", [update(0, 1, counts=unwait)], lease=3, lease_seconds=5.0)
    assert third.counts.waiting == 1
    # A waiting chain is not active: chain 2 is not leased (nor chain 0, updated here).
    assert [r.chain for r in third.leased] == [1]


async def test_draws_are_appended_and_read_in_slices(store: Store) -> None:
    await create(store)
    rows = [struct.pack("<2d", float(i), float(-i)) for i in range(5)]
    for version, row in enumerate(rows):
        await store.apply("s1", [update(2, version, draw=row)])
    assert await store.read_draws("s1", 2, 1, 3, ROW) == rows[1] + rows[2]
    assert await store.read_draws("s1", 2, 3, 99, ROW) == rows[3] + rows[4]
    assert await store.read_draws("s1", 2, 7, 9, ROW) == b""
    assert await store.read_draws("s1", 0, 0, 9, ROW) == b""
    (rec,) = await store.load_chains("s1", [2])
    assert rec.draws == 5


async def test_an_update_appends_several_rows(store: Store) -> None:
    await create(store)
    rows = [struct.pack("<2d", float(i), float(-i)) for i in range(5)]
    await store.apply("s1", [update(1, 0, draw=rows[0])])
    await store.apply("s1", [update(1, 1, draw=b"".join(rows[1:]), rows=4)])
    assert await store.read_draws("s1", 1, 0, 9, ROW) == b"".join(rows)
    (rec,) = await store.load_chains("s1", [1])
    assert rec.draws == 5


async def test_leases(store: Store) -> None:
    await create(store, chains=4)
    first = await store.apply("s1", [], lease=2, lease_seconds=60)
    taken = {r.chain for r in first.leased}
    assert len(taken) == 2 and all(r.lease_until > first.now for r in first.leased)
    second = await store.apply("s1", [], lease=10, lease_seconds=60)
    assert {r.chain for r in second.leased} == {0, 1, 2, 3} - taken
    assert (await store.apply("s1", [], lease=10, lease_seconds=60)).leased == []


async def test_leases_run_out(store: Store) -> None:
    await create(store, chains=2)
    first = await store.apply("s1", [], lease=2, lease_seconds=0.2)
    assert len(first.leased) == 2
    time.sleep(0.35)
    again = await store.apply("s1", [], lease=2, lease_seconds=60)
    assert {r.chain for r in again.leased} == {0, 1}
    assert {r.version for r in again.leased} == {0}  # leasing is not a state change


async def test_inactive_and_excluded_chains_are_not_leased(store: Store) -> None:
    await create(store, chains=3)
    await store.apply("s1", [update(0, 0, active=False)])
    result = await store.apply("s1", [], lease=3, lease_seconds=60, exclude=[1])
    assert [r.chain for r in result.leased] == [2]


async def test_update_releases_or_keeps_the_lease(store: Store) -> None:
    await create(store, chains=2)
    await store.apply("s1", [], lease=2, lease_seconds=60)
    # answered with a re-lease: the chain's next proposal belongs to this caller
    kept = await store.apply("s1", [update(0, 0, lease_seconds=60.0)])
    assert [r.chain for r in kept.leased] == [0] and kept.leased[0].version == 1
    # answered without one: the next proposal is free for anyone
    await store.apply("s1", [update(1, 0)])
    free = await store.apply("s1", [], lease=2, lease_seconds=60)
    assert [r.chain for r in free.leased] == [1]


async def test_lease_and_update_in_one_call(store: Store) -> None:
    await create(store, chains=3)
    result = await store.apply(
        "s1", [update(0, 0, lease_seconds=30.0)], lease=1, lease_seconds=30, exclude=[0]
    )
    assert result.applied == {0}
    assert sorted(r.chain for r in result.leased) == [0, 1]


async def test_a_repeated_request_gets_what_it_leased_back(store: Store) -> None:
    await create(store, chains=4)
    first = await store.apply("s1", [], lease=2, lease_seconds=60, request="r1")
    assert not first.replayed and len(first.leased) == 2
    again = await store.apply("s1", [], lease=2, lease_seconds=60, request="r1")
    assert again.replayed
    assert [(r.chain, r.lease_until) for r in again.leased] == [
        (r.chain, r.lease_until) for r in first.leased
    ]
    # Another request leases the other chains; the first one's stay its own.
    other = await store.apply("s1", [], lease=4, lease_seconds=60, request="r2")
    assert {r.chain for r in other.leased} == {0, 1, 2, 3} - {r.chain for r in first.leased}
    # A chain told since (its lease changed) is no longer the request's.
    told = first.leased[0]
    await store.apply("s1", [update(told.chain, 0)])
    third = await store.apply("s1", [], lease=2, lease_seconds=60, request="r1")
    assert third.replayed and [r.chain for r in third.leased] == [first.leased[1].chain]


async def test_a_request_that_leased_nothing_is_not_remembered(store: Store) -> None:
    await create(store, chains=1)
    await store.apply("s1", [], lease=1, lease_seconds=0.2)
    empty = await store.apply("s1", [], lease=1, lease_seconds=60, request="r")
    assert empty.leased == [] and not empty.replayed
    time.sleep(0.3)
    later = await store.apply("s1", [], lease=1, lease_seconds=60, request="r")
    assert [r.chain for r in later.leased] == [0] and not later.replayed


async def test_a_remembered_request_runs_out_with_its_leases(store: Store) -> None:
    await create(store, chains=2)
    first = await store.apply("s1", [], lease=1, lease_seconds=0.2, request="r")
    time.sleep(0.3)
    again = await store.apply("s1", [], lease=1, lease_seconds=60, request="r")
    assert not again.replayed and len(again.leased) == 1
    assert again.leased[0].lease_until > first.leased[0].lease_until


async def test_an_empty_answer_says_when_the_next_lease_runs_out(store: Store) -> None:
    await create(store, chains=2)
    taken = await store.apply("s1", [], lease=2, lease_seconds=30)
    assert taken.next_expiry is None  # something was leased
    empty = await store.apply("s1", [], lease=1, lease_seconds=30)
    assert empty.leased == []
    assert empty.next_expiry is not None
    assert abs(empty.next_expiry - min(r.lease_until for r in taken.leased)) < 1e-3


async def test_a_stopped_session_leases_nothing_but_applies_updates(store: Store) -> None:
    await create(store, chains=3)
    first = await store.apply("s1", [], lease=1, lease_seconds=60)
    assert first.stopped_by is None and len(first.leased) == 1
    assert (await store.notes("s1")).stopped_by is None
    assert await store.stop("s1", "rule") == "rule"
    assert await store.stop("s1", "other") == "rule"  # the first reason stands
    assert (await store.notes("s1")).stopped_by == "rule"
    # The chain leased before the stop is told: applied, its next proposal not leased.
    told = await store.apply(
        "s1", [update(first.leased[0].chain, 0, lease_seconds=60.0)], lease=3, lease_seconds=60
    )
    assert told.applied == {first.leased[0].chain}
    assert (told.leased, told.stopped_by) == ([], "rule")
    time.sleep(0.01)
    assert (await store.apply("s1", [], lease=3, lease_seconds=60)).leased == []
    with pytest.raises(SessionNotFound):
        await store.stop("nope", "rule")


async def test_a_revision_replaces_the_metadata_and_undoes_the_stop(store: Store) -> None:
    await create(store, chains=2)
    assert await store.stop("s1", "max_iterations") == "max_iterations"
    assert await store.revise("s1", b'{"rev": 1}', 2) is False  # not the next revision
    assert await store.get_meta("s1") != b'{"rev": 1}'
    assert await store.revise("s1", b'{"rev": 1}', 1) is True
    assert await store.get_meta("s1") == b'{"rev": 1}'
    assert (await store.notes("s1")).stopped_by is None
    assert len((await store.apply("s1", [], lease=2, lease_seconds=60)).leased) == 2
    # Two revisions from the same one: the first stands, the second is refused.
    assert await store.revise("s1", b'{"rev": 2}', 2) is True
    assert await store.revise("s1", b'{"rev": 2, "other": 1}', 2) is False
    assert await store.get_meta("s1") == b'{"rev": 2}'
    with pytest.raises(SessionNotFound):
        await store.revise("nope", b"{}", 1)


async def test_a_stopped_session_still_counts_its_waiting_chains(store: Store) -> None:
    # Both come back from one call, in their own fields (on Redis: the script's reply).
    await create(store, chains=3)
    wait = Counts(waiting=1)
    waiting = await store.apply("s1", [update(0, 0, counts=wait, active=False)])
    assert (waiting.counts.waiting, waiting.stopped_by) == (1, None)
    assert await store.stop("s1", "rule") == "rule"
    left = Counts(warming=-1)
    both = await store.apply("s1", [update(1, 0, counts=left)], lease=3, lease_seconds=60)
    assert (both.counts, both.stopped_by, both.leased) == (Counts(2, 0, 1), "rule", [])


async def test_diagnostics_are_kept_unless_newer_ones_are(store: Store) -> None:
    await create(store)
    notes = await store.notes("s1", diagnostics=True)
    assert (notes.stopped_by, notes.warnings, notes.diagnostics) == (None, None, None)
    await store.save_diagnostics("s1", 10, b'{"d": 10}', b"[10]")
    await store.save_diagnostics("s1", 30, b'{"d": 30}', b"[30]")
    await store.save_diagnostics("s1", 20, b'{"d": 20}', b"[20]")  # older: dropped
    notes = await store.notes("s1", diagnostics=True)
    assert (notes.warnings, notes.diagnostics) == (b"[30]", b'{"d": 30}')
    assert (await store.notes("s1")).diagnostics is None  # only when asked for
    await store.save_diagnostics("s1", 30, b'{"d": 31}', b"[31]")  # the same draws: kept
    assert (await store.notes("s1")).warnings == b"[31]"
    for call in (store.notes("nope"), store.save_diagnostics("nope", 1, b"{}", b"[]")):
        with pytest.raises(SessionNotFound):
            await call


async def test_a_leased_record_is_the_record_as_stored(store: Store) -> None:
    """What apply answers for a chain it updated and leased is what load_chains reads
    (the Redis script builds it from what it wrote), for binary states of any size."""
    await create(store)
    big = bytes(range(256)) * 400  # 100 KB, every byte value, zeros included
    row = struct.pack("<2d", 0.5, 3.0)
    updates = [
        update(0, 0, state=big, draw=row, cold=b'{"cold": 1}', lease_seconds=30.0),
        update(1, 0, init_value=-0.5, init_told=True, lease_seconds=30.0),
        update(2, 0, lease_seconds=30.0),
    ]
    result = await store.apply("s1", updates)
    assert result.applied == {0, 1, 2}
    stored = {r.chain: r for r in await store.load_chains("s1", [0, 1, 2])}
    assert sorted(r.chain for r in result.leased) == [0, 1, 2]
    for leased in result.leased:
        assert leased == stored[leased.chain], leased.chain
    assert stored[0].state == big and stored[0].draws == 1 and stored[0].cold_version == 1
    assert stored[1].init_value == -0.5 and stored[1].inits == 1
    # A second update of chain 0 sees the first one's counts.
    result = await store.apply("s1", [update(0, 1, state=b"x", draw=row, lease_seconds=30.0)])
    (again,) = result.leased
    assert (again.version, again.draws, again.cold_version) == (2, 2, 1)
    assert again == (await store.load_chains("s1", [0]))[0]


# ---------------------------------------------------------------- quotas and retries


QUOTA = Quota(sessions=10, bytes=1000, total_bytes=10_000)


async def reserve(store: Store, sid: str, owner: str = "o", size: int = 10, **kw: Any) -> str:
    """Reserve ``size`` bytes for ``sid`` within :data:`QUOTA`."""
    return await store.reserve(sid, owner, size=size, grant=100, quota=QUOTA, **kw)


async def test_concurrent_reservations_never_pass_a_limit(store: Store) -> None:
    """Thirty creates at once against a limit of ten sessions: exactly ten reserve, the
    rest are refused naming the limit; then the bytes, and every owner's bytes."""
    outcomes = await asyncio.gather(
        *(reserve(store, f"s{i}") for i in range(30)), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    assert sum(isinstance(o, str) for o in outcomes) == 10 and len(refused) == 20
    assert {(e.limit, e.used, e.maximum) for e in refused} == {("sessions", 10, 10)}
    big = await asyncio.gather(
        *(reserve(store, f"b{i}", owner="p", size=300) for i in range(6)), return_exceptions=True
    )
    assert sum(isinstance(o, str) for o in big) == 3  # 3 x 300 <= 1000 < 4 x 300
    assert {o.limit for o in big if isinstance(o, QuotaExceeded)} == {"bytes"}
    total = await asyncio.gather(
        *(reserve(store, f"t{i}", owner=f"q{i}", size=1000) for i in range(12)),
        return_exceptions=True,
    )
    # 10 x 10 + 3 x 300 = 1 000 used: 9 of 1 000 more fit in 10 000 in all.
    assert sum(isinstance(o, str) for o in total) == 9
    assert {o.limit for o in total if isinstance(o, QuotaExceeded)} == {"total_bytes"}


async def test_a_deleted_session_gives_its_reservation_back(store: Store) -> None:
    for i in range(10):
        await create_reserved(store, f"s{i}")
    with pytest.raises(QuotaExceeded):
        await reserve(store, "more")
    assert await store.delete_session("s3", "o") is True
    assert await reserve(store, "more") == "more"


async def create_reserved(store: Store, sid: str, owner: str = "o", **kw: Any) -> str:
    """:func:`reserve`, then create the session if the reservation is its own."""
    got = await reserve(store, sid, owner, **kw)
    if got == sid:
        meta = b'{"id": "%s"}' % sid.encode()
        await store.create_session(sid, owner, meta, [record(0)], [b"{}"], warming=1)
    return got


async def test_a_token_makes_a_create_safe_to_retry(store: Store) -> None:
    assert await create_reserved(store, "first", token="t1") == "first"
    assert await create_reserved(store, "retry", token="t1") == "first"  # nothing made
    assert await create_reserved(store, "other", owner="p", token="t1") == "other"
    assert len((await store.list_sessions("o", None, 10)).sessions) == 1
    # A first create that reserved but stopped before storing: its retry gets the id
    # and stores the session under it.
    assert await reserve(store, "half", token="t2") == "half"
    assert await reserve(store, "again", token="t2") == "half"
    await store.create_session("half", "o", b'{"id": "half"}', [record(0)], [b"{}"], 1)
    assert len((await store.list_sessions("o", None, 10)).sessions) == 2
    assert await reserve(store, "first") == "first"  # resent: reserved once
    assert len((await store.list_sessions("o", None, 10)).sessions) == 2
    with pytest.raises(ValueError):
        await reserve(store, "first", owner="p")  # another owner's id


async def test_a_delete_is_safe_to_retry(store: Store) -> None:
    await create_reserved(store, "a")
    with pytest.raises(SessionNotFound):
        await store.delete_session("a", "someone else")
    assert await store.delete_session("a", "o") is True
    assert await store.delete_session("a", "o") is False  # a retry: deleted before
    with pytest.raises(SessionNotFound):
        await store.delete_session("a", "someone else")
    with pytest.raises(SessionNotFound):
        await store.get_meta("a")


async def test_grow_reserves_more_within_the_quota(store: Store) -> None:
    await create_reserved(store, "open", size=100)
    assert await store.grow("open", 150, 4, QUOTA) == 150  # 200 more bytes
    assert await store.grow("open", 120, 4, QUOTA) == 150  # granted already: kept
    with pytest.raises(QuotaExceeded) as refused:
        await store.grow("open", 400, 4, QUOTA)  # 1 000 more: over 1 000 in all
    assert refused.value.limit == "bytes" and refused.value.used == 300
    assert await store.grow("open", 300, 4, QUOTA) == 300  # 900 in all
    with pytest.raises(QuotaExceeded):
        await reserve(store, "next", size=101)
    assert await store.delete_session("open", "o") is True
    assert await reserve(store, "next", size=1000) == "next"


async def test_concurrent_creates_deletes_and_listings_keep_the_books(store: Store) -> None:
    """Creating, deleting and listing at once, many times: no call fails, the listing
    holds exactly the sessions left, and the quota counts exactly them."""

    async def churn(k: int) -> None:
        for i in range(8):
            sid = f"c{k}-{i}"
            await create_reserved(store, sid)
            listed = (await store.list_sessions("o", None, 100)).sessions
            assert b'{"id": "%s"}' % sid.encode() in listed
            if i % 2 == 0:
                assert await store.delete_session(sid, "o") is True

    await asyncio.gather(*(churn(k) for k in range(2)), store.list_sessions("o", None, 5))
    left = (await store.list_sessions("o", None, 100)).sessions
    assert len(left) == 8
    assert await reserve(store, "one more") == "one more"  # 9 of 10 sessions
    assert await reserve(store, "two more") == "two more"
    with pytest.raises(QuotaExceeded):
        await reserve(store, "too many")


# Every test of the contract is a coroutine for anyio's plugin, and a name to import.
for _name, _test in list(globals().items()):
    if _name.startswith("test_"):
        globals()[_name] = pytest.mark.anyio(_test)
        __all__.append(_name)
