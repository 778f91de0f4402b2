"""What a store takes and gives (:class:`~kameleon.service.store.base.Store`): a chain's
record, an update with its counts, the result of an apply, a session's notes and a page
of sessions, a quota, and the errors a store raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kameleon.service.core_api import slot_init

__all__ = [
    "ApplyResult",
    "ChainRecord",
    "ChainUpdate",
    "Counts",
    "Quota",
    "QuotaExceeded",
    "SessionNotFound",
    "SessionNotes",
    "SessionPage",
    "StoreBusy",
    "StoreUnavailable",
]


class SessionNotFound(KeyError):
    """No session with that id (deleted, expired, or never created)."""


class StoreUnavailable(RuntimeError):
    """The backend could not be reached; the call changed nothing."""


class StoreBusy(StoreUnavailable):
    """This process had as many store operations under way as it may have, and none
    finished within the store timeout: the call did not reach the backend and changed
    nothing. The backend may be fine; the process is overloaded."""


@dataclass(frozen=True, slots=True)
class Quota:
    """The limits a reservation must keep: sessions and bytes of one owner, and bytes of
    every owner together (the store's whole budget)."""

    sessions: int
    bytes: int
    total_bytes: int


class QuotaExceeded(Exception):
    """A reservation would pass a limit of its :class:`Quota`; nothing was reserved.

    ``limit`` names the limit (``"sessions"``, ``"bytes"`` or ``"total_bytes"``),
    ``used`` is what is reserved already under it and ``maximum`` its value.
    """

    def __init__(self, limit: str, used: int, maximum: int) -> None:
        super().__init__(f"{limit}: {used} used of {maximum}")
        self.limit, self.used, self.maximum = limit, used, maximum


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


class Counts(NamedTuple):
    """The session's chains still in warm-up, done, and waiting for a new initial point:
    totals in an :class:`ApplyResult`, changes in a :class:`ChainUpdate`."""

    warming: int = 0
    finished: int = 0
    waiting: int = 0


NO_CHANGE = Counts()


@slot_init  # made at every write
@dataclass(frozen=True, slots=True)
class ChainUpdate:
    """A compare-and-set write of one chain (see :meth:`Store.apply`).

    The chain's record becomes ``state``, ``active`` and ``init_value``; ``cold``
    replaces the cold part (and bumps ``cold_version``) unless ``None``; ``draw`` is
    appended as ``rows`` rows (and bumps ``draws`` by ``rows``) unless ``None``;
    ``init_told`` bumps ``inits``. ``lease_seconds`` > 0 leases the chain's next
    proposal to the caller if the chain is active (and the session not stopped), else
    the lease is released. ``counts`` is what this write changes in the session's
    :class:`Counts`.
    """

    chain: int
    expected_version: int
    state: bytes
    active: bool
    cold: bytes | None = None
    draw: bytes | None = None
    init_value: float | None = None
    lease_seconds: float = 0.0
    init_told: bool = False
    counts: Counts = NO_CHANGE
    rows: int = 1


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What :meth:`Store.apply` did.

    ``applied``: the chains written (all those updated, or none). ``conflicts`` maps the
    chain of each update whose expected version was stale to the chain's current record
    (then nothing was written and nothing leased). ``leased`` holds the records of the
    chains leased by this call (those re-leased by their update, then free ones), each
    with its new ``lease_until``. ``now`` is the store's clock; ``counts`` the session's
    :class:`Counts` after the call; ``stopped_by`` the reason given to :meth:`Store.stop`,
    if the session was stopped (then nothing was leased). ``replayed``: the call's
    ``request`` had been seen, and ``leased`` holds what that earlier call leased that is
    still its (see :meth:`Store.apply`). ``next_expiry``: when nothing was leased, the
    store-clock time at which the first running lease of an active chain runs out
    (``None``: no lease is running, or something was leased).
    """

    applied: frozenset[int]
    conflicts: dict[int, ChainRecord]
    leased: list[ChainRecord]
    now: float
    counts: Counts
    stopped_by: str | None = None
    replayed: bool = False
    next_expiry: float | None = None


@dataclass(frozen=True, slots=True)
class SessionNotes:
    """What the service wrote about a session as a whole after creating it.

    ``stopped_by`` is the reason given to :meth:`Store.stop`, or ``None``;
    ``diagnostics`` and ``warnings`` are the documents last given to
    :meth:`Store.save_diagnostics` (``diagnostics`` only when asked for), or ``None``.
    """

    stopped_by: str | None = None
    warnings: bytes | None = None
    diagnostics: bytes | None = None


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a listing: metadata documents, and the cursor of the next page."""

    sessions: list[bytes]
    next_cursor: str | None = None
