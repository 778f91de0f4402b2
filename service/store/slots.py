"""Slots: at most so many store operations of one service process at once.

A Redis client's pool holds a bounded number of connections, and redis-py's pools
(the single server's and each node's of a cluster) raise instead of waiting when every
connection is in use. So every operation of the Redis store first takes one of as many
slots as the pool has connections, and gives it back when it returns: each operation
runs its commands one after another (a pipeline is one command here), so it holds at
most one connection of each node, and the pool is never asked for more than it has.
When every slot is taken, an operation waits for one, up to the store timeout, then
fails with :class:`~kameleon.service.store.records.StoreBusy`: this process is busy, the
store itself was not asked.

A slot is held only while the store works: a long poll takes one for each look at the
store, never while it sleeps. An operation called by another one, in the same task,
runs in its caller's slot (never waiting for a second slot while it holds one, which
could deadlock once every slot is held by a caller).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kameleon.service.store.records import StoreBusy, StoreUnavailable

__all__ = ["LateWrite", "Slots", "with_slot"]

P = ParamSpec("P")
T = TypeVar("T")

#: Whether the running task holds a slot (of any store) already.
_HOLDING: ContextVar[bool] = ContextVar("kameleon_store_slot", default=False)


class LateWrite(StoreUnavailable):
    """The store ran a write after its deadline, so the write changed nothing."""


class Slots:
    """``size`` slots; :meth:`acquire` waits up to ``timeout`` seconds for one.

    ``answered`` is when (``time.monotonic``) an operation last got the store's answer:
    an operation that times out while others are answered met a busy process (or a
    busy store), not an unreachable one (:func:`with_slot`).
    """

    def __init__(self, size: int, timeout: float) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self.timeout = timeout
        self.answered = -math.inf
        self._free = asyncio.Semaphore(size)

    async def acquire(self) -> None:
        """Take a slot; :class:`StoreBusy` if none frees up within the timeout."""
        if not self._free.locked():
            await self._free.acquire()  # returns at once
            return
        try:
            async with asyncio.timeout(self.timeout):
                await self._free.acquire()
        except TimeoutError:
            raise StoreBusy(
                f"all {self.size} store connections of this service process stayed in use "
                f"for {self.timeout:g} s"
            ) from None

    def release(self) -> None:
        self._free.release()


class HasSlots(Protocol):
    @property
    def slots(self) -> Slots: ...


S = TypeVar("S", bound=HasSlots)


def with_slot(
    fn: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """Run a Redis store operation in a slot of its store (:class:`Slots`), and turn
    its failures to reach the store into :class:`StoreUnavailable`, or
    :class:`StoreBusy` when the store was answering all along:

    - a connection refused or lost (after the client's resends): unavailable;
    - a write the store ran after its deadline (so it changed nothing): busy, since
      the store answered; the time went on this process's backlog (the write was sent
      late) or on the store's;
    - a command that got no answer in time: busy if the store answered another
      operation of this process in the second half of this one's wait, or if the
      operation failed only after twice the timeout (this process's event loop was too
      busy even to notice the timeout in time); else unavailable (the store stalled);
    - a pool with no connection left (the slots keep that from happening): busy.
    """

    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if _HOLDING.get():
            return await fn(self, *args, **kwargs)  # in its caller's slot and its care
        slots = self.slots
        await slots.acquire()
        token = _HOLDING.set(True)
        started = time.monotonic()
        try:
            result = await fn(self, *args, **kwargs)
        except MaxConnectionsError as exc:
            raise StoreBusy(str(exc)) from exc
        except RedisConnectionError as exc:
            raise StoreUnavailable(str(exc)) from exc
        except LateWrite as exc:
            raise StoreBusy(str(exc)) from exc
        except RedisTimeoutError as exc:
            now = time.monotonic()
            if slots.answered > started + slots.timeout / 2 or now > started + 2 * slots.timeout:
                raise StoreBusy(f"the store answered others, not this in time: {exc}") from exc
            raise StoreUnavailable(str(exc)) from exc
        except OSError as exc:
            raise StoreUnavailable(str(exc)) from exc
        except Exception:
            slots.answered = time.monotonic()  # an answer (no such session, ...)
            raise
        finally:
            _HOLDING.reset(token)
            slots.release()
        slots.answered = time.monotonic()
        return result

    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    wrapper.__doc__ = fn.__doc__
    return wrapper
