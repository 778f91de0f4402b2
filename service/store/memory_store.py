"""The embedded default store: everything in this process's memory.

Thread-safe (one lock, short critical sections) and copy-on-write: records are frozen
and replaced, never changed, so a reader keeps a consistent snapshot. Sessions do not
expire and are lost when the process stops; use the Redis store for anything that must
outlive the process or be shared between processes.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from service.store.base import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    SessionNotFound,
    SessionPage,
    Store,
)

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    owner: str
    meta: bytes
    created: int
    chains: list[ChainRecord]
    cold: list[bytes]
    warming: int
    draws: list[bytearray] = field(default_factory=list)
    finished: int = 0


def _cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not cursor.isdigit() or len(cursor) > 18:
        raise ValueError("cursor is not one this store gave out")
    return int(cursor)


class MemoryStore(Store):
    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._counter = 0

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None

    def _get(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    async def create_session(
        self,
        session_id: str,
        owner: str,
        meta: bytes,
        chains: Sequence[ChainRecord],
        colds: Sequence[bytes],
        warming: int,
    ) -> None:
        with self._lock:
            if session_id in self._sessions:
                raise ValueError(f"session {session_id} exists")
            self._counter += 1
            self._sessions[session_id] = _Session(
                owner=owner,
                meta=meta,
                created=self._counter,
                chains=list(chains),
                cold=list(colds),
                warming=warming,
                draws=[bytearray() for _ in chains],
            )

    async def get_meta(self, session_id: str) -> bytes:
        with self._lock:
            return self._get(session_id).meta

    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        after = _cursor(cursor)
        with self._lock:
            mine = sorted((s.created, s.meta) for s in self._sessions.values() if s.owner == owner)
        page = [item for item in mine if item[0] > after][: limit + 1]
        more = len(page) > limit
        page = page[:limit]
        return SessionPage([m for _, m in page], str(page[-1][0]) if more else None)

    async def delete_session(self, session_id: str) -> None:
        with self._lock:
            self._get(session_id)
            del self._sessions[session_id]

    async def load_chains(self, session_id: str, chains: Sequence[int]) -> list[ChainRecord]:
        with self._lock:
            session = self._get(session_id)
            return [session.chains[c] for c in chains]

    async def load_cold(self, session_id: str, chain: int) -> tuple[int, bytes]:
        with self._lock:
            session = self._get(session_id)
            return session.chains[chain].cold_version, session.cold[chain]

    async def apply(
        self,
        session_id: str,
        updates: Sequence[ChainUpdate],
        *,
        lease: int = 0,
        lease_seconds: float = 0.0,
        exclude: Sequence[int] = (),
    ) -> ApplyResult:
        now = time.time()
        applied: set[int] = set()
        conflicts: dict[int, ChainRecord] = {}
        leased: list[ChainRecord] = []
        with self._lock:
            session = self._get(session_id)
            for up in updates:
                current = session.chains[up.chain]
                if current.version != up.expected_version:
                    conflicts[up.chain] = current
                    continue
                cold_version = current.cold_version
                if up.cold is not None:
                    session.cold[up.chain] = up.cold
                    cold_version += 1
                draws = current.draws
                if up.draw is not None:
                    session.draws[up.chain] += up.draw
                    draws += 1
                record = ChainRecord(
                    chain=up.chain,
                    version=current.version + 1,
                    state=up.state,
                    cold_version=cold_version,
                    lease_until=now + up.lease_seconds if up.lease_seconds > 0 else 0.0,
                    active=up.active,
                    init_value=up.init_value,
                    draws=draws,
                    inits=current.inits + up.init_told,
                )
                session.chains[up.chain] = record
                session.warming -= up.left_warmup
                session.finished += up.finished
                applied.add(up.chain)
                if up.lease_seconds > 0 and up.active:
                    leased.append(record)
            if lease > 0:
                skip = set(exclude) | {up.chain for up in updates}
                extra = 0
                for index, record in enumerate(session.chains):
                    if extra >= lease:
                        break
                    if index in skip or not record.active or record.lease_until > now:
                        continue
                    record = dataclasses.replace(record, lease_until=now + lease_seconds)
                    session.chains[index] = record
                    leased.append(record)
                    extra += 1
            warming, finished = session.warming, session.finished
        return ApplyResult(frozenset(applied), conflicts, leased, now, warming, finished)

    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        with self._lock:
            session = self._get(session_id)
            return bytes(session.draws[chain][start * row_bytes : stop * row_bytes])

    async def touch(self, session_id: str) -> None:
        with self._lock:
            self._get(session_id)
