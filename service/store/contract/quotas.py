"""The contract's tests of quotas and retries: reservations that never pass a limit
together, given back on a delete, and creates and deletes safe to retry."""

from __future__ import annotations

import asyncio

import pytest

from kameleon.service.store.base import Store
from kameleon.service.store.contract.common import (
    QUOTA,
    anyio_tests,
    create_reserved,
    record,
    reserve,
)
from kameleon.service.store.records import QuotaExceeded, SessionNotFound


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


__all__ = anyio_tests(globals())
