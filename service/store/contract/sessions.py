"""The contract's tests of sessions, their chains' records, draws, leases and stops:
what :meth:`~kameleon.service.store.base.Store.apply` and the reads do."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from kameleon.service.store.base import Store
from kameleon.service.store.contract.common import ROW, anyio_tests, create, update
from kameleon.service.store.records import Counts, SessionNotFound


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


__all__ = anyio_tests(globals())
