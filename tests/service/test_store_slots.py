"""Slots: at most so many store operations of a process at once, no deadlock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kameleon.service.store.records import StoreBusy, StoreUnavailable
from kameleon.service.store.slots import LateWrite, Slots, with_slot

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Fake:
    """A store whose operations count how many of them run at once."""

    def __init__(self, size: int, timeout: float = 0.2) -> None:
        self.slots = Slots(size, timeout)
        self.running = 0
        self.most = 0

    @with_slot
    async def work(self, seconds: float) -> int:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.running -= 1
        return 1

    @with_slot
    async def outer(self) -> int:
        return await self.work(0.0) + await self.work(0.0)

    @with_slot
    async def fail(self, exc: Exception) -> None:
        raise exc

    @with_slot
    async def fail_after(self, failing: Callable[[], Awaitable[None]]) -> None:
        await failing()


async def test_no_more_operations_at_once_than_slots_and_the_rest_wait() -> None:
    store = Fake(3, timeout=5.0)
    done = await asyncio.gather(*(store.work(0.01) for _ in range(50)))
    assert sum(done) == 50
    assert store.most == 3


async def test_an_operation_that_finds_no_slot_in_time_is_busy() -> None:
    store = Fake(1, timeout=0.1)
    holder = asyncio.create_task(store.work(1.0))
    await asyncio.sleep(0.01)
    with pytest.raises(StoreBusy):
        await store.work(0.0)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert await store.work(0.0) == 1  # the cancelled holder gave its slot back


async def test_an_operation_inside_another_runs_in_its_slot() -> None:
    """With one slot, held by the outer operation, the inner ones do not wait for it."""
    store = Fake(1, timeout=0.1)
    assert await store.outer() == 2
    assert await asyncio.gather(*(store.outer() for _ in range(5))) == [2] * 5


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (RedisConnectionError("refused"), StoreUnavailable),
        (OSError("unreachable"), StoreUnavailable),
        (RedisTimeoutError("no answer"), StoreUnavailable),
        (MaxConnectionsError("Too many connections"), StoreBusy),
        (LateWrite("ran after its deadline"), StoreBusy),
    ],
)
async def test_failures_to_reach_the_store(raised: Exception, expected: type[Exception]) -> None:
    store = Fake(2)
    with pytest.raises(expected) as caught:
        await store.fail(raised)
    if expected is StoreUnavailable:
        assert not isinstance(caught.value, StoreBusy)


async def test_a_timeout_while_the_store_answers_others_is_busy() -> None:
    """The store answered another operation during this one's wait: the time went on
    the process's backlog, not on an unreachable store."""
    store = Fake(4, timeout=0.2)

    async def late_timeout() -> None:
        await asyncio.sleep(0.2)
        raise RedisTimeoutError("no answer")

    failing = asyncio.create_task(store.fail_after(late_timeout))
    await asyncio.sleep(0.15)
    assert await store.work(0.0) == 1
    with pytest.raises(StoreBusy):
        await failing
