"""Handing freed memory back to the system.

When sessions are deleted, CPython frees their objects, but glibc's allocator keeps the
freed pages in its heaps for reuse: the resident size (RSS) stays where the peak left
it. ``malloc_trim(0)`` gives every whole free page of every heap back (BENCHMARKS.md,
"Memory over time"). :class:`Trimmer` calls it after deletes, at most once every
:data:`INTERVAL_SECONDS`, in a worker thread so that no request waits for it; a delete
during the pause is followed by one trim when the pause ends. Where the C library has
no ``malloc_trim`` (musl, macOS, Windows) it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

__all__ = ["INTERVAL_SECONDS", "Trimmer", "malloc_trim"]

log = logging.getLogger("kameleon.service")

#: The shortest pause between two trims (a trim walks every heap with the allocator's
#: lock held: about 66 ms for a 280 MB heap of small arrays, 5 ms when nothing is left
#: to give back; other threads' allocations wait that long).
INTERVAL_SECONDS = 5.0


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` as a function of no arguments, or ``None`` where the C
    library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Calls ``trim`` (by default :func:`malloc_trim`) in a thread after :meth:`freed`,
    at most once every ``interval`` seconds; never raises.

    :meth:`freed` is called on the event loop; it returns at once.
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        trim: Callable[[], object] | None = None,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.trim = (trim or malloc_trim()) if enabled else None
        self.interval = interval
        self.clock = clock
        self.trims = 0
        self._last = -float("inf")
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self.trim is not None

    def freed(self) -> None:
        """Memory was freed (a session deleted): trim now, or when the pause ends; one
        trim waiting covers every delete before it."""
        if self.trim is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
            delay = max(0.0, self._last + self.interval - self.clock())
            self._timer = loop.call_later(delay, self._start)
        except Exception:  # never into a request
            log.debug("malloc_trim not scheduled", exc_info=True)

    def _start(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done():
            # The last trim still runs (longer than the pause): look again a pause later.
            self._timer = loop.call_later(self.interval, self._start)
            return
        wait = self._last + self.interval - self.clock()
        if wait > 0:
            # The last trim began later than it was scheduled (its thread waited for the
            # CPU), and the pause runs from when it began.
            self._timer = loop.call_later(wait, self._start)
            return
        self._last = self.clock()
        self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            await asyncio.to_thread(self._call)
        except Exception:
            log.debug("malloc_trim failed", exc_info=True)

    def _call(self) -> None:
        if self.trim is not None:
            self._last = self.clock()  # the pause runs from when a trim begins
            self.trim()
            self.trims += 1

    async def close(self) -> None:
        """Cancel a trim that waits; let one that runs finish."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
