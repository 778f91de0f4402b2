"""Long polls: requests that wait for a proposal to free up.

A request with nothing to hand out sleeps until the first of: a tell in this process on
the same session (it may have freed a chain's next proposal), the next lease's expiry
(its proposal is handed out again then), a short poll interval (tells in other service
processes are not seen here), or the end of its wait. Then it asks the store again.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

__all__ = ["POLL_SECONDS", "Waiting"]

#: How often a waiting request looks again for what other service processes freed.
POLL_SECONDS = 0.25


class Waiting:
    """One event per session with waiting requests, set by tells in this process."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._waiters: dict[str, int] = {}

    def wake(self, session_id: str) -> None:
        """A tell in this process: wake the requests waiting on ``session_id``."""
        event = self._events.get(session_id)
        if event is not None:
            event.set()

    async def wait(self, session_id: str, left: float, next_expiry: str | None) -> None:
        """Sleep until a tell here, the next lease expiry, the poll interval or ``left``
        seconds, whichever comes first."""
        timeout = min(left, POLL_SECONDS)
        if next_expiry is not None:
            until = datetime.fromisoformat(next_expiry).timestamp() - time.time()
            timeout = min(timeout, max(until, 0.0) + 0.001)
        event = self._events.get(session_id)
        if event is None or event.is_set():
            event = self._events[session_id] = asyncio.Event()
        self._waiters[session_id] = self._waiters.get(session_id, 0) + 1
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters[session_id] -= 1
            if self._waiters[session_id] == 0:
                del self._waiters[session_id]
                if self._events.get(session_id) is event:
                    del self._events[session_id]
