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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kameleon.service.store.base import Store
from kameleon.service.store.records import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    Counts,
    Quota,
    QuotaExceeded,
    SessionNotes,
    SessionNotFound,
    SessionPage,
)

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    owner: str
    meta: bytes
    chains: list[ChainRecord]
    cold: list[bytes]
    warming: int
    draws: list[bytearray] = field(default_factory=list)
    finished: int = 0
    waiting: int = 0
    stopped_by: str | None = None
    revision: int = 0  # of ``meta`` (Store.revise)
    diagnosed: int = -1  # total draws behind ``diagnostics``
    diagnostics: bytes | None = None
    warnings: bytes | None = None
    # request id -> (when it is forgotten, the chains it leased and their expiries)
    requests: dict[str, tuple[float, list[tuple[int, float]]]] = field(default_factory=dict)


@dataclass
class _Reservation:
    """What a session holds of its owner's share (:meth:`Store.reserve`)."""

    owner: str
    size: int  # bytes
    grant: int  # iterations per chain that ``size`` pays for
    order: int  # the listing's order


#: Deleted sessions remembered, so that a retried delete succeeds (oldest forgotten first).
TOMBSTONES = 100_000


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
        self._tokens: dict[tuple[str, str], str] = {}  # (owner, token) -> session id
        self._reserved: dict[str, _Reservation] = {}
        self._deleted: dict[str, str] = {}  # session id -> owner, of deleted sessions
        self._usage: dict[str, list[int]] = {}  # owner -> [sessions, bytes]
        self._total = 0  # bytes reserved by every owner

    def _take(self, owner: str, sessions: int, size: int, quota: Quota | None) -> None:
        """Take ``sessions`` and ``size`` bytes from ``owner``'s share (under the lock)."""
        used = self._usage.setdefault(owner, [0, 0])
        if quota is not None:
            if sessions and used[0] + sessions > quota.sessions:
                raise QuotaExceeded("sessions", used[0], quota.sessions)
            if used[1] + size > quota.bytes:
                raise QuotaExceeded("bytes", used[1], quota.bytes)
            if self._total + size > quota.total_bytes:
                raise QuotaExceeded("total_bytes", self._total, quota.total_bytes)
        used[0] += sessions
        used[1] += size
        self._total += size

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None

    def _get(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    async def reserve(
        self,
        session_id: str,
        owner: str,
        *,
        size: int,
        grant: int,
        quota: Quota | None = None,
        token: str | None = None,
    ) -> str:
        with self._lock:
            if token is not None:
                earlier = self._tokens.get((owner, token))
                if earlier is not None and earlier in self._reserved:
                    return earlier
            held = self._reserved.get(session_id)
            if held is not None:
                if held.owner == owner:
                    return session_id  # reserved already: a resent call
                raise ValueError(f"session {session_id} is reserved by another owner")
            self._take(owner, 1, size, quota)
            self._counter += 1
            self._reserved[session_id] = _Reservation(owner, size, grant, self._counter)
            if token is not None:
                self._tokens[(owner, token)] = session_id
            return session_id

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
            if session_id not in self._reserved:
                raise ValueError(f"session {session_id} was not reserved")
            self._sessions[session_id] = _Session(
                owner=owner,
                meta=meta,
                chains=list(chains),
                cold=list(colds),
                warming=warming,
                draws=[bytearray() for _ in chains],
            )

    async def grow(self, session_id: str, grant: int, size: int, quota: Quota) -> int:
        with self._lock:
            self._get(session_id)
            held = self._reserved[session_id]
            if held.grant >= grant:
                return held.grant
            extra = (grant - held.grant) * size
            self._take(held.owner, 0, extra, quota)
            held.size += extra
            held.grant = grant
            return grant

    async def get_meta(self, session_id: str) -> bytes:
        with self._lock:
            return self._get(session_id).meta

    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        after = _cursor(cursor)
        with self._lock:
            mine = sorted(
                (self._reserved[i].order, s.meta)
                for i, s in self._sessions.items()
                if s.owner == owner
            )
        page = [item for item in mine if item[0] > after][: limit + 1]
        more = len(page) > limit
        page = page[:limit]
        return SessionPage([m for _, m in page], str(page[-1][0]) if more else None)

    async def delete_session(self, session_id: str, owner: str) -> bool:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.owner != owner:
                if session is None and self._deleted.get(session_id) == owner:
                    return False
                raise SessionNotFound(session_id)
            del self._sessions[session_id]
            held = self._reserved.pop(session_id)
            used = self._usage[owner]
            used[0] -= 1
            used[1] -= held.size
            self._total -= held.size
            self._deleted[session_id] = owner
            if len(self._deleted) > TOMBSTONES:
                del self._deleted[next(iter(self._deleted))]
            self._tokens = {k: v for k, v in self._tokens.items() if v != session_id}
            return True

    async def load_chains(self, session_id: str, chains: Iterable[int]) -> list[ChainRecord]:
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
        request: str | None = None,
    ) -> ApplyResult:
        now = time.time()
        leased: list[ChainRecord] = []
        replayed, next_expiry = False, None
        with self._lock:
            session = self._get(session_id)
            conflicts = {
                up.chain: session.chains[up.chain]
                for up in updates
                if session.chains[up.chain].version != up.expected_version
            }
            if not conflicts:
                remembered = _remembered(session, request, now)
                replayed = remembered is not None
                leased = [r for up in updates if (r := _write(session, up, now)) is not None]
                if remembered is not None:
                    taken = {r.chain for r in leased}
                    leased += [
                        record
                        for chain, until in remembered
                        if chain not in taken
                        and (record := session.chains[chain]).lease_until == until
                        and until > now
                    ]
                elif lease > 0:
                    skip = set(exclude) | {up.chain for up in updates}
                    leased += _lease(session, lease, lease_seconds, skip, now)
                if request is not None and leased and not replayed:
                    expiry = max(r.lease_until for r in leased)
                    session.requests[request] = (expiry, [(r.chain, r.lease_until) for r in leased])
                if not leased:
                    running = [
                        r.lease_until for r in session.chains if r.active and r.lease_until > now
                    ]
                    next_expiry = min(running, default=None)
            counts = Counts(session.warming, session.finished, session.waiting)
            stopped_by = session.stopped_by
        applied = frozenset() if conflicts else frozenset(up.chain for up in updates)
        return ApplyResult(
            applied, conflicts, leased, now, counts, stopped_by, replayed, next_expiry
        )

    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        with self._lock:
            session = self._get(session_id)
            return bytes(session.draws[chain][start * row_bytes : stop * row_bytes])

    async def read_draws_strided(
        self, session_id: str, chain: int, start: int, stop: int, step: int, row_bytes: int
    ) -> bytes:
        with self._lock:
            data = self._get(session_id).draws[chain]
            stop = min(stop, len(data) // row_bytes)
            return b"".join(
                data[row * row_bytes : (row + 1) * row_bytes]
                for row in range(start, stop, max(1, step))
            )

    async def stop(self, session_id: str, reason: str) -> str:
        with self._lock:
            session = self._get(session_id)
            if session.stopped_by is None:
                session.stopped_by = reason
            return session.stopped_by

    async def revise(self, session_id: str, meta: bytes, revision: int) -> bool:
        with self._lock:
            session = self._get(session_id)
            if session.revision != revision - 1:
                return False
            session.meta, session.revision, session.stopped_by = meta, revision, None
            return True

    async def notes(self, session_id: str, *, diagnostics: bool = False) -> SessionNotes:
        with self._lock:
            session = self._get(session_id)
            return SessionNotes(
                session.stopped_by, session.warnings, session.diagnostics if diagnostics else None
            )

    async def save_diagnostics(
        self, session_id: str, draws: int, diagnostics: bytes, warnings: bytes
    ) -> None:
        with self._lock:
            session = self._get(session_id)
            if draws >= session.diagnosed:
                session.diagnosed = draws
                session.diagnostics, session.warnings = diagnostics, warnings

    async def touch(self, session_id: str) -> None:
        with self._lock:
            self._get(session_id)


def _write(session: _Session, up: ChainUpdate, now: float) -> ChainRecord | None:
    """Write one update (its version checked); the record if it leases the chain."""
    current = session.chains[up.chain]
    cold_version = current.cold_version
    if up.cold is not None:
        session.cold[up.chain] = up.cold
        cold_version += 1
    draws = current.draws
    if up.draw is not None:
        session.draws[up.chain] += up.draw
        draws += up.rows
    lease_next = up.lease_seconds > 0 and up.active and session.stopped_by is None
    lease_until = now + up.lease_seconds if lease_next else 0.0
    record = ChainRecord(
        chain=up.chain,
        version=current.version + 1,
        state=up.state,
        cold_version=cold_version,
        lease_until=lease_until,
        active=up.active,
        init_value=up.init_value,
        draws=draws,
        inits=current.inits + up.init_told,
    )
    session.chains[up.chain] = record
    session.warming += up.counts.warming
    session.finished += up.counts.finished
    session.waiting += up.counts.waiting
    return record if lease_next else None


def _remembered(
    session: _Session, request: str | None, now: float
) -> list[tuple[int, float]] | None:
    """What the call named ``request`` leased, if it is still remembered (forgetting the
    session's requests whose leases have all run out)."""
    expired = [k for k, (until, _) in session.requests.items() if until <= now]
    for key in expired:
        del session.requests[key]
    if request is None or request not in session.requests:
        return None
    return session.requests[request][1]


def _lease(
    session: _Session, lease: int, lease_seconds: float, skip: set[int], now: float
) -> list[ChainRecord]:
    """Lease up to ``lease`` free active chains not in ``skip``, lowest index first."""
    leased: list[ChainRecord] = []
    if session.stopped_by is not None:
        return leased
    for index, record in enumerate(session.chains):
        if len(leased) >= lease:
            break
        if index in skip or not record.active or record.lease_until > now:
            continue
        record = dataclasses.replace(record, lease_until=now + lease_seconds)
        session.chains[index] = record
        leased.append(record)
    return leased
