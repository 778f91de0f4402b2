"""Sessions as a whole: create, find (metadata), summarise, list, delete."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kameleon.core.serialization import encode
from kameleon.service.config import Settings
from kameleon.service.jsonio import dumps, loads
from kameleon.service.sessions.budget import describe
from kameleon.service.sessions.chains import LRU, Chains, ChainView
from kameleon.service.sessions.errors import Invalid, NotFound, Quota
from kameleon.service.sessions.meta import SessionMeta, new_meta, stop_doc
from kameleon.service.sessions.stepping import iso
from kameleon.service.store.base import ChainRecord, SessionNotes, SessionNotFound, Store

if TYPE_CHECKING:
    from kameleon.service.schemas import SessionCreate

__all__ = ["Catalog", "render_summary"]


class Catalog:
    """The sessions of one store, and the metadata this process keeps of them."""

    def __init__(self, store: Store, settings: Settings, chains: Chains) -> None:
        self.store = store
        self.settings = settings
        self.chains = chains
        self._meta: LRU = LRU(10_000)
        self._touched: dict[str, float] = {}

    async def create(self, body: SessionCreate, owner: str) -> dict[str, Any]:
        meta = new_meta(body, owner, self.settings)
        await self._check_quota(meta, owner)
        records, colds = [], []
        for c in range(meta.chains):
            state = meta.sampler.init(meta.first_point(c), meta.params, seed=meta.seed, chain=c)
            hot, cold = encode(state)
            records.append(ChainRecord(c, 0, dumps(hot), 0, 0.0, True, None, 0, 0))
            colds.append(dumps(cold))
        warming = meta.chains if meta.warmup > 0 else 0
        await self.store.create_session(meta.id, owner, meta.to_bytes(), records, colds, warming)
        self._meta.put(meta.id, meta)
        return await self.summary(meta.id, owner)

    async def _check_quota(self, meta: SessionMeta, owner: str) -> None:
        """Refuse a session that would take ``owner`` over its share (:class:`Quota`)."""
        count, used, cursor = 0, 0, None
        while True:
            page = await self.store.list_sessions(owner, cursor, 1000)
            for doc in page.sessions:
                count += 1
                used += SessionMeta.build(loads(doc)).estimated_bytes
            cursor = page.next_cursor
            if cursor is None:
                break
        s = self.settings
        if count + 1 > s.max_sessions_per_key:
            raise Quota(
                f"this key has {count} sessions, the most one key may keep "
                f"(max_sessions_per_key); delete some to make room",
                sessions=count,
                limit=s.max_sessions_per_key,
            )
        if used + meta.estimated_bytes > s.max_bytes_per_key:
            raise Quota(
                f"this key's sessions may need about {describe(used)} of memory and this "
                f"one {describe(meta.estimated_bytes)}, over the {describe(s.max_bytes_per_key)} "
                "one key may use (max_bytes_per_key); delete some to make room",
                bytes=used + meta.estimated_bytes,
                limit=s.max_bytes_per_key,
            )

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

    async def _touch(self, session_id: str) -> None:
        """Refresh the session's expiry, at most every tenth of its time to live."""
        now = time.monotonic()
        if now - self._touched.get(session_id, -math.inf) > self.settings.session_ttl_seconds / 10:
            self._touched[session_id] = now
            await self.store.touch(session_id)

    def forget(self, session_id: str) -> None:
        self._meta.pop(session_id, None)
        self._touched.pop(session_id, None)

    async def summary(self, session_id: str, owner: str) -> dict[str, Any]:
        meta = await self.meta(session_id, owner)
        chains = await self.chains.load(meta, range(meta.chains))
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
        await self.meta(session_id, owner)
        with contextlib.suppress(SessionNotFound):  # deleted meanwhile
            await self.store.delete_session(session_id)
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
    return {
        "chain": ch.chain,
        "status": ch.status(meta, stopped),
        "iterations": st.iteration,
        "evaluations": int(st.iteration + ch.inits),
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
