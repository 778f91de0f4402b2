"""The store interface: where sessions, chain states and draws live.

Contract (every implementation passes ``tests/service/test_store_contract.py``):

- **Compare-and-set, all or nothing.** :meth:`Store.apply` applies its updates if and
  only if every chain's version still equals its ``expected_version``: the states, cold
  parts, appended draws, leases and version bumps land together or not at all. Writers
  of different chains never wait for each other: only the same chain's version decides.
- **Leases** are decided by the store's clock, so every service process agrees on them.
  A chain can be leased when it is ``active`` and its lease has run out.
- **Values returned are never mutated by later writes** (records are frozen; bytes are
  immutable).
- **Unknown sessions** raise :class:`~kameleon.service.store.records.SessionNotFound`;
  an unreachable backend raises
  :class:`~kameleon.service.store.records.StoreUnavailable`
  (:class:`~kameleon.service.store.records.StoreBusy` when the process has too many
  calls under way to make one more), and then nothing was changed by the failed call.
- **Durability**: when ``apply`` returns, the update is in the store (for Redis, as
  durable as the server is configured to be).
- Draws are fixed-size float64 rows appended one per applied transition and read in
  slices without loading a whole chain.
- **Stopping**: once :meth:`Store.stop` has returned, no :meth:`Store.apply` leases a
  proposal of that session any more (updates are still applied).
- **Quotas are reserved, not checked then spent.** :meth:`Store.create_session` and
  :meth:`Store.grow` test a :class:`~kameleon.service.store.records.Quota` and reserve
  the bytes in one atomic step, so concurrent creates (from any number of service
  processes) never pass a limit together; a session's reservation is given back when it
  is deleted or expires.
- **Writes are safe to retry.** A create retried with its ``token`` returns the session
  the first made (and completes it if the first stopped half way); a delete retried by
  the session's owner succeeds again (:meth:`Store.delete_session`).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence

from kameleon.service.store.records import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    Quota,
    SessionNotes,
    SessionPage,
)

__all__ = ["Store"]


class Store(abc.ABC):
    """Sessions, chains and draws.

    Implementations are safe to share between the tasks of one event loop (and, for the
    memory store, between threads). Every method that names a session raises
    :class:`SessionNotFound` when there is no such session, and every method may raise
    :class:`StoreUnavailable`, after which the call changed nothing. Session ids are
    opaque strings without braces; ``meta`` documents are opaque bytes, stored and given
    back as they are.
    """

    name: str

    @abc.abstractmethod
    async def ping(self) -> bool:
        """Whether the backend answers. Never raises."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store is not used afterwards."""

    @abc.abstractmethod
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
        """Reserve ``size`` bytes and one session of ``owner``'s share, within ``quota``
        (none: no limit), for the session ``session_id`` that :meth:`create_session`
        then stores; it is listed for ``owner`` from now on, after the sessions reserved
        before it. ``grant`` is the number of iterations per chain that ``size`` pays
        for (see :meth:`grow`). Returns ``session_id``.

        ``token`` (an owner's idempotency key) makes a create safe to retry: while the
        session reserved with it lives, a later call of the same owner with the same
        token reserves nothing and returns that session's id (which the caller stores,
        under that id, if the first create stopped before it had).

        Reserving an id that ``owner`` reserved already changes nothing (a call resent
        after its answer was lost). Raises :class:`QuotaExceeded` when the reservation
        would pass a limit, and :class:`ValueError` if another owner reserved
        ``session_id``; then nothing changed.
        A reservation whose session is never stored is given back when it expires.
        """

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
        """Store a new session, at once: its metadata document, its chains (records
        numbered 0 to n - 1, in order, with no lease, no draws, no inits), each chain's
        cold part (``colds[k]`` for chain k), and how many chains start in warm-up.

        Raises :class:`ValueError` if ``session_id`` is stored already (and changes
        nothing).
        """

    @abc.abstractmethod
    async def grow(self, session_id: str, grant: int, size: int, quota: Quota) -> int:
        """Raise the session's grant to ``grant`` iterations per chain, reserving
        ``size`` bytes for each iteration added, within ``quota``; the grant that stands
        (a grant at or above ``grant`` already is kept and nothing reserved). Atomic.

        Raises :class:`QuotaExceeded` (nothing reserved) when the reservation would pass
        a limit.
        """

    @abc.abstractmethod
    async def get_meta(self, session_id: str) -> bytes:
        """The session's metadata document, as given to :meth:`create_session`."""

    @abc.abstractmethod
    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> SessionPage:
        """Up to ``limit`` (>= 1) metadata documents of ``owner``'s sessions, oldest
        first, from ``cursor`` (``None``: the first), and the cursor of the next page.

        Raises :class:`ValueError` for a cursor this store did not give out. Sessions
        deleted between two pages are skipped, never repeated.
        """

    @abc.abstractmethod
    async def delete_session(self, session_id: str, owner: str) -> bool:
        """Remove ``owner``'s session, its chains and its draws, and give its
        reservation back; ``True``. A session ``owner`` deleted before (within the
        store's idle expiry) is still deleted: ``False``. Any other id raises
        :class:`SessionNotFound`. Safe to retry: a call that failed half way is
        completed by the next."""

    @abc.abstractmethod
    async def load_chains(self, session_id: str, chains: Iterable[int]) -> list[ChainRecord]:
        """Current records of ``chains`` (indices of the session's chains), in that
        order. Each record is consistent in itself; records of different chains may be
        from different moments."""

    @abc.abstractmethod
    async def load_cold(self, session_id: str, chain: int) -> tuple[int, bytes]:
        """``(cold_version, cold)`` of one chain, consistent with each other."""

    @abc.abstractmethod
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
        """Write ``updates`` (of distinct chains) if every chain's version equals its
        ``expected_version``, then lease up to ``lease`` further chains, lowest index
        first, that are active, not leased, not updated here and not in ``exclude``, for
        ``lease_seconds`` each.

        ``request`` names the call (a client's ``request_id``; opaque, at most 128
        characters). The chains a call with a ``request`` leases are remembered under it
        until their leases run out. A later call with the same ``request`` applies its
        updates as usual but leases no further chains: its ``leased`` holds, besides the
        chains its own updates lease, those remembered chains whose lease is still the
        one that call took (not told since, not run out), and ``replayed`` is true. So a
        client that retries a request whose answer it lost gets the same proposals back.

        Atomic: either every update is written and the leases taken, or (some version
        was stale) nothing changes and :attr:`ApplyResult.conflicts` names the stale
        chains. Concurrent calls on the same chains are serialised; on other chains they
        do not wait for each other. When the session is stopped (:meth:`stop`), updates
        are written but nothing is leased. Durable when it returns (for Redis, as durable
        as the server is configured to be).
        """

    @abc.abstractmethod
    async def read_draws(
        self, session_id: str, chain: int, start: int, stop: int, row_bytes: int
    ) -> bytes:
        """Rows ``start`` up to ``stop`` (clipped to those there are; empty when
        ``stop <= start``) of a chain's draws, each ``row_bytes`` long, without reading
        the others."""

    async def read_draws_strided(
        self, session_id: str, chain: int, start: int, stop: int, step: int, row_bytes: int
    ) -> bytes:
        """Rows ``start, start + step, ...`` below ``stop`` (clipped to those there are)
        of a chain's draws, concatenated, without reading the rows between them. This
        default reads row by row; the stores read them in one go."""
        if step <= 1:
            return await self.read_draws(session_id, chain, start, stop, row_bytes)
        parts = [
            await self.read_draws(session_id, chain, row, row + 1, row_bytes)
            for row in range(start, stop, step)
        ]
        return b"".join(parts)

    @abc.abstractmethod
    async def stop(self, session_id: str, reason: str) -> str:
        """Mark the session stopped for ``reason`` unless it is stopped already, and
        return the reason that stands. Atomic; from then on :meth:`apply` leases
        nothing."""

    @abc.abstractmethod
    async def revise(self, session_id: str, meta: bytes, revision: int) -> bool:
        """Replace the session's metadata document with ``meta``, its ``revision``-th,
        and undo :meth:`stop` (the session may go on), if the document stored now is
        the ``revision - 1``-th (the first, from :meth:`create_session`, is the 0-th);
        whether it did. Atomic; the session's expiry is unchanged.

        Raises :class:`SessionNotFound`.
        """

    @abc.abstractmethod
    async def notes(self, session_id: str, *, diagnostics: bool = False) -> SessionNotes:
        """The session's notes; its diagnostics document only if ``diagnostics``."""

    @abc.abstractmethod
    async def save_diagnostics(
        self, session_id: str, draws: int, diagnostics: bytes, warnings: bytes
    ) -> None:
        """Keep a diagnostics document and its warnings, computed on ``draws`` draws in
        all, unless the documents kept already were computed on more draws. Atomic."""

    @abc.abstractmethod
    async def touch(self, session_id: str) -> None:
        """Refresh the session's idle expiry (a no-op for a store without expiry)."""
