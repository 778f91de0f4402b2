"""Sessions as a whole: create, find (metadata), summarise, list, delete."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kameleon.service.config import Settings
from kameleon.service.core_api import encode
from kameleon.service.jsonio import dumps, loads
from kameleon.service.sessions.budget import (
    describe,
    grant_step,
    iteration_bytes,
    quota_of,
    session_bytes,
)
from kameleon.service.sessions.chains import LRU, Chains, ChainView, MetaChanged
from kameleon.service.sessions.errors import Busy, Invalid, NotFound
from kameleon.service.sessions.errors import Quota as Quota_
from kameleon.service.sessions.handout import iso
from kameleon.service.sessions.meta import SessionMeta, new_meta, stop_doc
from kameleon.service.sessions.revision import reserve, revised, rewrite_chains
from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainRecord, QuotaExceeded, SessionNotes, SessionNotFound

if TYPE_CHECKING:
    from kameleon.service.schemas import SessionCreate

__all__ = ["Catalog", "refusal", "render_summary"]

#: Tries of a request that meets a concurrent revision of its session.
ATTEMPTS = 16


def refusal(exc: QuotaExceeded, need: int) -> Quota_:
    """The error that says which limit a reservation of ``need`` bytes would pass."""
    if exc.limit == "sessions":
        return Quota_(
            f"this key has {exc.used} sessions, the most one key may keep "
            "(max_sessions_per_key); delete some to make room",
            sessions=exc.used,
            limit=exc.maximum,
        )
    if exc.limit == "bytes":
        return Quota_(
            f"this key's sessions may need about {describe(exc.used)} of memory and this "
            f"needs {describe(need)} more, over the {describe(exc.maximum)} one key may use "
            "(max_bytes_per_key); delete some to make room",
            bytes=exc.used + need,
            limit=exc.maximum,
        )
    return Quota_(
        f"the sessions of every key may need about {describe(exc.used)} of memory and this "
        f"needs {describe(need)} more, over the {describe(exc.maximum)} this service keeps "
        "for all of them (max_bytes_total); retry when sessions have ended",
        bytes=exc.used + need,
        limit=exc.maximum,
    )


def reservation(meta: SessionMeta) -> tuple[int, int]:
    """The bytes a new session reserves and the iterations per chain they pay for: all
    of them with ``max_iterations``, else the first of an open-ended session's steps."""
    grant = meta.max_iterations
    if grant is None:
        grant = grant_step(meta.dim, meta.chains, len(meta.stats))
    size = session_bytes(meta.algorithm, meta.dim, meta.chains, meta.params, grant)
    return size, grant


class Catalog:
    """The sessions of one store, and the metadata this process keeps of them."""

    def __init__(self, store: Store, settings: Settings, chains: Chains) -> None:
        self.store = store
        self.settings = settings
        self.chains = chains
        self._meta: LRU = LRU(10_000)
        self._touched: dict[str, float] = {}

    async def create(
        self, body: SessionCreate, owner: str, token: str | None = None
    ) -> dict[str, Any]:
        """Reserve the new session's share of the quotas, then store it; with ``token``
        (the request's idempotency key), a retry returns the session the first made."""
        meta = new_meta(body, owner, self.settings)
        size, grant = reservation(meta)
        try:
            reserved = await self.store.reserve(
                meta.id, owner, size=size, grant=grant, quota=quota_of(self.settings), token=token
            )
        except QuotaExceeded as exc:
            raise refusal(exc, size) from None
        if reserved != meta.id:  # the token's earlier create
            try:
                return await self.summary(reserved, owner)
            except (NotFound, SessionNotFound):
                # It stopped before it stored its session: this one takes its place.
                meta = dataclasses.replace(meta, id=reserved)
        records, colds = [], []
        for c in range(meta.chains):
            state = meta.sampler.init(meta.first_point(c), meta.params, seed=meta.seed, chain=c)
            hot, cold = encode(state)
            records.append(ChainRecord(c, 0, dumps(hot), 0, 0.0, True, None, 0, 0))
            colds.append(dumps(cold))
        warming = meta.chains if meta.warmup > 0 else 0
        try:
            await self.store.create_session(
                meta.id, owner, meta.to_bytes(), records, colds, warming
            )
        except ValueError:
            # Stored already, under this request's random id: by this very call, resent
            # after a lost answer, or by a concurrent retry with its token. That one stands.
            self.forget(meta.id)
        else:
            self._meta.put(meta.id, meta)
        return await self.summary(meta.id, owner)

    async def meta(self, session_id: str, owner: str) -> SessionMeta:
        """The session's metadata; :class:`NotFound` unless it is ``owner``'s."""
        meta: SessionMeta | None = self._meta.get(session_id)
        if meta is None:
            try:
                doc = loads(await self.store.get_meta(session_id))
            except SessionNotFound:
                raise NotFound("no such session") from None
            meta = SessionMeta.build(doc)
            self._meta.put(session_id, meta)
        if meta.owner != owner:
            raise NotFound("no such session")
        await self._touch(session_id)
        return meta

    async def fresh(self, meta: SessionMeta) -> SessionMeta:
        """The session's metadata after ``meta``, which a chain showed to be out of date
        (:class:`~.chains.MetaChanged`): this process's, if newer, else the store's."""
        cached: SessionMeta | None = self._meta.get(meta.id)
        if cached is not None and cached.revision > meta.revision:
            return cached
        try:
            doc = loads(await self.store.get_meta(meta.id))
        except SessionNotFound:
            raise NotFound("no such session") from None
        newer = SessionMeta.build(doc)
        self._meta.put(meta.id, newer)
        return newer

    async def revise(
        self, session_id: str, owner: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Give the session a later ``max_iterations`` or another stopping rule
        (:mod:`.revision`); its summary after."""
        meta = await self.fresh(await self.meta(session_id, owner))
        for _ in range(ATTEMPTS):
            meta, views = await self._chains_of(meta)
            top = max((ch.state.iteration for ch in views), default=0)
            notes = await self.store.notes(session_id)
            new = revised(meta, changes, top, notes.stopped_by, self.settings)
            try:
                await reserve(self.store, new, self.settings)
            except QuotaExceeded as exc:
                raise refusal(exc, iteration_bytes(new.dim, new.chains, len(new.stats))) from None
            if await self.store.revise(session_id, new.to_bytes(), new.revision):
                self._meta.put(session_id, new)
                await rewrite_chains(self.store, self.chains, new, notes.stopped_by is None)
                return await self.summary(session_id, owner)
            meta = await self.fresh(meta)  # revised meanwhile: decide on that revision
        raise Busy("too many concurrent updates of this session; retry")

    async def _chains_of(self, meta: SessionMeta) -> tuple[SessionMeta, list[ChainView]]:
        """Every chain of the session, and the metadata they were written under."""
        for _ in range(ATTEMPTS):
            try:
                return meta, await self.chains.load(meta, range(meta.chains))
            except MetaChanged:
                meta = await self.fresh(meta)
        raise Busy("the session is revised too often; retry")

    async def _touch(self, session_id: str) -> None:
        """Refresh the session's expiry, at most every tenth of its time to live."""
        now = time.monotonic()
        if now - self._touched.get(session_id, -math.inf) > self.settings.session_ttl_seconds / 10:
            self._touched[session_id] = now
            await self.store.touch(session_id)

    def forget(self, session_id: str) -> None:
        """Drop everything this process keeps of a session (deleted, or gone)."""
        self._meta.pop(session_id, None)
        self._touched.pop(session_id, None)
        self.chains.forget(session_id)

    async def summary(self, session_id: str, owner: str) -> dict[str, Any]:
        meta, chains = await self._chains_of(await self.meta(session_id, owner))
        return render_summary(meta, chains, await self.store.notes(meta.id))

    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> dict[str, Any]:
        try:
            page = await self.store.list_sessions(owner, cursor, limit)
        except ValueError:
            raise Invalid("cursor is not one this service gave out", field="cursor") from None
        out = []
        for raw in page.sessions:
            doc = loads(raw)
            try:
                out.append(await self.summary(doc["id"], owner))
            except (NotFound, SessionNotFound):
                continue  # deleted meanwhile
        return {"sessions": out, "next": page.next_cursor}

    async def delete(self, session_id: str, owner: str) -> None:
        """Delete ``owner``'s session; a retried delete succeeds again (the store keeps
        who deleted what for as long as a session would have lived)."""
        try:
            await self.meta(session_id, owner)
        except NotFound:
            with contextlib.suppress(SessionNotFound):
                await self.store.get_meta(session_id)
                raise  # another owner's
        try:
            await self.store.delete_session(session_id, owner)
        finally:
            self.forget(session_id)


def render_summary(
    meta: SessionMeta, chains: Sequence[ChainView], notes: SessionNotes
) -> dict[str, Any]:
    """A session's summary (``schemas.SessionSummary``)."""
    stopped = notes.stopped_by is not None
    per_chain = [chain_summary(meta, ch, stopped) for ch in chains]
    iterations = sum(c["iterations"] for c in per_chain)
    accepted = sum(ch.state.accepted for ch in chains)
    status = _status(meta, chains, stopped)
    checked = loads(notes.warnings) if notes.warnings is not None else None
    return {
        "id": meta.id,
        "algorithm": meta.algorithm,
        "dim": meta.dim,
        "chains": meta.chains,
        "seed": meta.seed,
        "pseudo_marginal": meta.pseudo_marginal,
        "prior_power": meta.prior_power,
        "needs_gradient": meta.sampler.evaluation.gradient or meta.sampler.evaluation.parts,
        "warmup": meta.warmup,
        "max_iterations": meta.max_iterations,
        "param_names": list(meta.param_names),
        "options": meta.resolved_options(),
        "initial_radius": meta.initial_radius,
        "max_initial_attempts": meta.max_initial_attempts,
        "created_at": iso(meta.created_at),
        "status": status,
        "iterations": iterations,
        "evaluations": sum(c["evaluations"] for c in per_chain),
        "acceptance_rate": accepted / iterations if iterations else None,
        "chain_summaries": per_chain,
        "stop": stop_doc(meta.stop),
        "stopped_by": notes.stopped_by or ("max_iterations" if status == "done" else None),
        "warnings": checked["warnings"] if checked is not None else None,
        "warnings_draws": checked["draws"] if checked is not None else None,
    }


def chain_summary(meta: SessionMeta, ch: ChainView, stopped: bool = False) -> dict[str, Any]:
    """A chain's summary (``schemas.ChainSummary``)."""
    st = ch.state
    # A sampler whose transitions take several evaluations counts them in its state,
    # from the initial point set on; the initial points told are counted apart.
    counted = getattr(st, "evaluations", None)
    if counted is None:
        evaluations = st.iteration + ch.inits
    else:
        evaluations = int(counted) + ch.inits - (st.logdensity is not None and counted > 0)
    return {
        "chain": ch.chain,
        "status": ch.status(meta, stopped),
        "iterations": st.iteration,
        "evaluations": int(evaluations),
        "acceptance_rate": st.accepted / st.iteration if st.iteration else None,
        "resets": st.epoch,
    }


def _status(meta: SessionMeta, chains: Sequence[ChainView], stopped: bool) -> str:
    if stopped or (chains and all(meta.is_done(ch.state) for ch in chains)):
        return "done"
    if any(ch.waiting for ch in chains):
        return "needs_initial_point"
    if any(ch.state.iteration < meta.warmup for ch in chains):
        return "warmup"
    return "sampling"
