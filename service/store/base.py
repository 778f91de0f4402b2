"""The store interface: where sessions, chain states and draws live.

Contract (every implementation passes ``tests/service/test_store_contract.py``):

- **Unit of atomicity: one chain.** :meth:`Store.apply` applies each
  :class:`ChainUpdate` if and only if the chain's version still equals
  ``expected_version``; the state, the cold part, the appended draw, the lease and the
  version bump land together or not at all. Updates of different chains never wait for
  each other, and one stale update does not stop the others in the same call.
- **Leases** are decided by the store's clock, so every service process agrees on them.
  A chain can be leased when it is ``active`` and its lease has run out.
- **Values returned are never mutated by later writes** (records are frozen; bytes are
  immutable).
- **Unknown sessions** raise :class:`SessionNotFound`; an unreachable backend raises
  :class:`StoreUnavailable`, and then nothing was changed by the failed call.
- **Durability**: when ``apply`` returns, the update is in the store (for Redis, as
  durable as the server is configured to be).
- Draws are fixed-size float64 rows appended one per applied transition and read in
  slices without loading a whole chain.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ApplyResult",
    "ChainRecord",
    "ChainUpdate",
    "SessionNotFound",
    "SessionPage",
    "Store",
    "StoreUnavailable",
]


class SessionNotFound(KeyError):
    """No session with that id (deleted, expired, or never created)."""


class StoreUnavailable(RuntimeError):
    """The backend could not be reached; the call changed nothing."""


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """One chain as stored.

    Attributes
    ----------
    chain
        Index of the chain in its session.
    version
        Bumped by every applied update (not by leasing); the compare-and-set token.
    state
        The sampler state's hot part, encoded (JSON bytes).
    cold_version
        Bumped whenever the cold part changes, so readers can cache it.
    lease_until
        Store-clock time (seconds) until which the chain's outstanding proposal is
        leased; 0 when not leased.
    active
        Whether the chain has an outstanding proposal (not done, not waiting for a new
        initial point).
    init_value
        The log density told for the current initial point, or ``None`` before that.
    draws
        Number of draw rows appended.
    inits
        Number of initial points told (and applied).
    """

    chain: int
    version: int
    state: bytes
    cold_version: int
    lease_until: float
    active: bool
    init_value: float | None
    draws: int
    inits: int = 0


@dataclass(frozen=True, slots=True)
class ChainUpdate:
    """A compare-and-set write of one chain (see :meth:`Store.apply`)."""

    chain: int
    expected_version: int
    state: bytes
    active: bool
    cold: bytes | None = None  # new cold part, only when it changed
    draw: bytes | None = None  # one row to append
    init_value: float | None = None
    lease_seconds: float = 0.0  # > 0: lease the chain's next proposal to this caller
    left_warmup: bool = False  # this update ends the chain's warm-up
    finished: bool = False  # this update brings the chain to its last iteration
    init_told: bool = False  # this update applies a told initial point


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What :meth:`Store.apply` did.

    ``conflicts`` maps the chain of each update that was *not* applied to the chain's
    current record. ``leased`` holds the records of chains leased by this call (those
    re-leased by their update, then free ones), each with its new ``lease_until``.
    ``warming`` and ``finished`` count the session's chains still in warm-up and those
    done, after this call.
    """

    applied: frozenset[int]
    conflicts: dict[int, ChainRecord]
    leased: list[ChainRecord]
    now: float
    warming: int
    finished: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a listing: metadata documents, and the cursor of the next page."""

    sessions: list[bytes]
    next_cursor: str | None = None


class Store(abc.ABC):
    """Sessions, chains and draws. Implementations must be safe to share between threads
    and between tasks of one event loop."""

    name: str

    @abc.abstractmethod
    async def ping(self) -> bool:
        """Whether the backend answers."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections."""

    @abc.abstractmethod
    async def create_session(
        self,
        session_id: str,
        owner: str,
        meta: bytes,
        chains: Sequence[ChainRecord],
        colds: Sequence[bytes],
        warming: int,
    ) -> None:
        """Store a new session: its metadata document, its chains, each chain's cold
        part, and how many chains start in warm-up."""

    @abc.abstractmethod
    async def get_meta(self, session_id: str) -> bytes:
        """The session's metadata document."""

    @abc.abstractmethod
    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        """Metadata of ``owner``'s sessions, oldest first, ``limit`` at a time."""

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> None:
        """Remove the session, its chains and its draws."""

    @abc.abstractmethod
    async def load_chains(self, session_id: str, chains: Sequence[int]) -> list[ChainRecord]:
        """Current records of ``chains``, in that order."""

    @abc.abstractmethod
    async def load_cold(self, session_id: str, chain: int) -> tuple[int, bytes]:
        """``(cold_version, cold)`` of one chain."""

    @abc.abstractmethod
    async def apply(
        self,
        session_id: str,
        updates: Sequence[ChainUpdate],
        *,
        lease: int = 0,
        lease_seconds: float = 0.0,
        exclude: Sequence[int] = (),
    ) -> ApplyResult:
        """Apply ``updates`` (each atomically, by compare-and-set on its version), then
        lease up to ``lease`` further chains that are active and free, other than those
        in ``exclude`` and those updated here, for ``lease_seconds``."""

    @abc.abstractmethod
    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        """Rows ``start`` up to ``stop`` (clipped to what exists) of a chain's draws,
        each ``row_bytes`` long."""

    @abc.abstractmethod
    async def touch(self, session_id: str) -> None:
        """Refresh the session's idle expiry."""
