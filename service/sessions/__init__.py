"""The protocol's use cases, by room:

- :mod:`.catalog`: sessions as a whole (create, metadata, summary, list, update,
  delete); :mod:`.meta` is what a session is, and the checks of a new one;
  :mod:`.revision` how an update revises it.
- :mod:`.stepping`: ask, tell, step and reset; :mod:`.decide` is the exactly-once
  decision per chain (pure), :mod:`.chains` the chains as this process sees them;
  :mod:`.leases` renews leases or hands them back; :mod:`.told` parses told results.
- :mod:`.draws`: the draw row layout and reading draws; :mod:`.diagnostics`:
  diagnostics, warnings and the stopping rule.
- :mod:`.consensus`: consensus Monte Carlo, draws combined from sessions that each
  sampled one shard of a data set.

:class:`SessionService` is what the routes call. The use cases raise their own errors
(:mod:`.errors`); the HTTP edge maps them to answers. This package is the only place
that knows both the sampler interface (``core.interface.sampler``) and the store (``store.base``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from kameleon.service.config import Settings
from kameleon.service.memory import Trimmer
from kameleon.service.sessions.catalog import ATTEMPTS, Catalog, chain_summary
from kameleon.service.sessions.chains import Chains, MetaChanged
from kameleon.service.sessions.consensus import consensus
from kameleon.service.sessions.diagnostics import Diagnostics
from kameleon.service.sessions.draws import ChainSlice, DrawsQuery, read_slices
from kameleon.service.sessions.errors import Busy, Invalid, NotFound
from kameleon.service.sessions.leases import set_leases
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.stepping import Result, Stepper
from kameleon.service.sessions.trace import (
    RunningCache,
    TraceQuery,
    chain_lengths,
    etag,
    read_trace,
)
from kameleon.service.sessions.waiting import Waiting
from kameleon.service.store.base import Store
from kameleon.service.store.records import SessionNotFound

if TYPE_CHECKING:
    from kameleon.service.schemas import SessionCreate

__all__ = ["SessionMeta", "SessionService"]


class Observer(Protocol):
    """What the service reports to (the app's metrics)."""

    def count_answer(self, answer: dict[str, Any]) -> None: ...

    def count_session(self) -> None: ...


class SessionService:
    """The protocol's use cases over one store."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        chains = Chains(store)
        self.catalog = Catalog(store, settings, chains)
        self.diagnostics = Diagnostics(store, chains)
        self.stepper = Stepper(store, settings, chains, self.diagnostics, self.catalog.fresh)
        self.waiting = Waiting()
        self.running = RunningCache()
        #: Gives the memory of deleted sessions back to the system.
        self.memory = Trimmer(settings.malloc_trim)
        #: Told every answer of ask, tell and step (the app's metrics), if set.
        self.observe: Observer | None = None

    async def store_ready(self) -> bool:
        try:
            return await asyncio.wait_for(self.store.ping(), timeout=2.0)
        except Exception:
            return False

    def _gone(self, session_id: str) -> _Gone:
        """A session the store no longer has: forgotten here, and :class:`NotFound`."""
        return _Gone(self.catalog, session_id)

    # ------------------------------------------------------------------ sessions

    async def create(
        self, body: SessionCreate, owner: str, token: str | None = None
    ) -> dict[str, Any]:
        created = await self.catalog.create(body, owner, token)
        if self.observe is not None:
            self.observe.count_session()
        return created

    async def meta(self, session_id: str, owner: str) -> SessionMeta:
        with self._gone(session_id):
            return await self.catalog.meta(session_id, owner)

    async def summary(self, session_id: str, owner: str) -> dict[str, Any]:
        with self._gone(session_id):
            return await self.catalog.summary(session_id, owner)

    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> dict[str, Any]:
        return await self.catalog.list_sessions(owner, cursor, limit)

    async def update(
        self, session_id: str, owner: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A later ``max_iterations`` or another stopping rule (:mod:`.revision`); a
        session that was done goes on, and the long polls waiting on it wake."""
        with self._gone(session_id):
            summary = await self.catalog.revise(session_id, owner, changes)
        self.waiting.wake(session_id)
        return summary

    async def delete(self, session_id: str, owner: str) -> None:
        with self._gone(session_id):
            await self.catalog.delete(session_id, owner)
        self.memory.freed()

    # ------------------------------------------------------------- ask/tell/step

    async def ask(
        self,
        session_id: str,
        owner: str,
        max_: int,
        lease_seconds: float | None,
        *,
        wait: float = 0.0,
        request: str | None = None,
    ) -> dict[str, Any]:
        answer = await self.step(
            session_id, owner, [], max_, lease_seconds, wait=wait, request=request
        )
        del answer["results"]
        return answer

    async def tell(self, session_id: str, owner: str, results: Sequence[Result]) -> dict[str, Any]:
        with self._gone(session_id):
            meta = await self.catalog.meta(session_id, owner)
            outcomes, _, _ = await self.stepper.step(meta, results, 0, 0.0)
        if outcomes:
            self.waiting.wake(session_id)
        answer = {"results": outcomes}
        if self.observe is not None:
            self.observe.count_answer(answer)
        return answer

    async def step(
        self,
        session_id: str,
        owner: str,
        results: Sequence[Result],
        max_: int | None,
        lease_seconds: float | None,
        *,
        wait: float = 0.0,
        request: str | None = None,
    ) -> dict[str, Any]:
        """Tell ``results`` and lease up to ``max_`` proposals; with none to hand out, ask
        again whenever one may have freed up, until ``wait`` seconds have passed."""
        want = max_ if max_ is not None else max(1, len(results))
        self.stepper.check_max(want)
        lease = self.stepper.lease(lease_seconds)
        deadline = time.monotonic() + self.stepper.wait(wait)
        with self._gone(session_id):
            meta = await self.catalog.meta(session_id, owner)
            outcomes, proposals, status = await self.stepper.step(
                meta, results, want, lease, request
            )
            if outcomes:
                self.waiting.wake(session_id)
            while not proposals and not status["done"] and want > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await self.waiting.wait(session_id, left, status.get("next_lease_expires_at"))
                _, proposals, status = await self.stepper.step(meta, [], want, lease, request)
        answer = {"results": outcomes, "proposals": proposals, **status}
        if self.observe is not None:
            self.observe.count_answer(answer)
        return answer

    async def set_leases(
        self, session_id: str, owner: str, ids: Sequence[str], lease_seconds: float
    ) -> dict[str, Any]:
        """Renew or hand back leases (:mod:`.leases`); a proposal handed back wakes the
        long polls waiting for one."""
        self.stepper.lease(lease_seconds)  # the limit of every lease
        with self._gone(session_id):
            meta = await self.catalog.meta(session_id, owner)
            for _ in range(ATTEMPTS):
                try:
                    answer = await set_leases(
                        self.store, self.stepper.chains, meta, ids, lease_seconds
                    )
                    break
                except MetaChanged:
                    meta = await self.catalog.fresh(meta)
            else:
                raise Busy("the session is revised too often; retry")
        if lease_seconds == 0:
            self.waiting.wake(session_id)
        return answer

    async def reset_chain(
        self, session_id: str, owner: str, chain: int, initial: Sequence[float]
    ) -> dict[str, Any]:
        with self._gone(session_id):
            meta = await self.catalog.meta(session_id, owner)
            for _ in range(ATTEMPTS):
                try:
                    return chain_summary(meta, await self.stepper.reset_chain(meta, chain, initial))
                except MetaChanged:
                    meta = await self.catalog.fresh(meta)
        raise Busy("the session is revised too often; retry")

    # ------------------------------------------------------------ draws, diagnostics

    async def diagnostics_of(self, session_id: str, owner: str) -> dict[str, Any]:
        with self._gone(session_id):
            return await self.diagnostics.of(await self.catalog.meta(session_id, owner))

    async def weights_of(self, session_id: str, owner: str) -> dict[str, Any]:
        with self._gone(session_id):
            return await self.diagnostics.weights(await self.catalog.meta(session_id, owner))

    async def consensus(
        self,
        owner: str,
        session_ids: Sequence[str],
        method: str,
        draws: int | None,
        seed: int,
        max_draws: int,
    ) -> dict[str, Any]:
        """Consensus Monte Carlo over the caller's sessions ``session_ids``
        (:mod:`.consensus`): ``draws`` consensus draws (``None``: as many as the shard
        with the fewest has, at most ``max_draws``)."""
        metas = []
        for k, session_id in enumerate(session_ids):
            if session_ids.index(session_id) != k:
                raise Invalid(f"sessions[{k}] repeats {session_id!r}", field=f"sessions.{k}")
            with self._gone(session_id):
                metas.append(await self.catalog.meta(session_id, owner))
        ids = [m.id for m in metas]
        try:
            return await consensus(
                self.store, self.diagnostics, metas, method, draws, seed, max_draws
            )
        except SessionNotFound:
            for session_id in ids:
                self.catalog.forget(session_id)
            raise NotFound("a session was deleted meanwhile") from None

    async def draws(
        self, meta: SessionMeta, query: DrawsQuery, page_rows: int
    ) -> tuple[list[ChainSlice], int | None]:
        """One page of draws (see :func:`.draws.read_slices`)."""
        with self._gone(meta.id):
            return await read_slices(self.store, meta, query, page_rows)

    async def trace(
        self, session_id: str, owner: str, query: TraceQuery, if_none_match: str | None
    ) -> tuple[str, dict[str, Any] | None]:
        """The trace (:mod:`.trace`) and its ETag; ``None`` for the trace when
        ``if_none_match`` names that ETag (the caller has it already)."""
        with self._gone(session_id):
            meta = await self.catalog.meta(session_id, owner)
            for p in query.params:
                if p >= meta.dim:
                    raise Invalid(f"no parameter {p} in a session of dim {meta.dim}", field="param")
            lengths = await chain_lengths(self.store, meta)
            tag = etag(meta, lengths, query)
            if if_none_match is not None and _matches(if_none_match, tag):
                return tag, None
            params = query.params or tuple(range(meta.dim))
            query = TraceQuery(query.points, query.include_warmup, params, query.checkpoints)
            return tag, await read_trace(self.store, meta, lengths, query, self.running)


def _matches(if_none_match: str, tag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``tag`` (weak comparison, RFC 9110)."""
    if if_none_match.strip() == "*":
        return True
    return tag in {t.strip().removeprefix("W/") for t in if_none_match.split(",")}


class _Gone:
    """Turns :class:`SessionNotFound` into :class:`NotFound`, forgetting the session (a
    class, not a generator: it is on the hot path)."""

    __slots__ = ("catalog", "session_id")

    def __init__(self, catalog: Catalog, session_id: str) -> None:
        self.catalog, self.session_id = catalog, session_id

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, SessionNotFound):
            self.catalog.forget(self.session_id)
            raise NotFound("no such session") from None
