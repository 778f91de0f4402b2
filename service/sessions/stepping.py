"""Ask, tell, step and reset: decide per chain (``decide``), then write once.

A request is decided on the chains as this process last saw them, then written in one
:meth:`Store.apply`, which applies every update or none. When the store refuses because
another process moved some chain on, the chains it names are read and the whole request
is decided again. A result found not outstanding on a chain read from the store refuses
the whole request (409) before anything is written. With one process per session (the
common case) a tell or a step is one store round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kameleon.service.config import Settings
from kameleon.service.core_api import reset
from kameleon.service.sessions.budget import grant_step, iteration_bytes, quota_of, session_bytes
from kameleon.service.sessions.chains import LRU, Chains, ChainView, MetaChanged, encode_state
from kameleon.service.sessions.decide import ChainPlan, decide
from kameleon.service.sessions.diagnostics import Diagnostics, crossed
from kameleon.service.sessions.draws import told as told_value
from kameleon.service.sessions.errors import Busy, Conflict, Invalid, NotFound, SamplerFailed
from kameleon.service.sessions.handout import handed_out, iso, rounds_handed_out
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.rounds import decide_rounds
from kameleon.service.sessions.told import Result, parse, refusal
from kameleon.service.sessions.verdicts import Told
from kameleon.service.store.base import Store
from kameleon.service.store.records import (
    ApplyResult,
    ChainRecord,
    ChainUpdate,
    Counts,
    QuotaExceeded,
)

__all__ = ["Result", "Stepper", "session_status"]

MAX_ATTEMPTS = 16

log = logging.getLogger("kameleon")


def session_status(meta: SessionMeta, counts: Counts, stopped: bool) -> dict[str, Any]:
    if stopped or counts.finished >= meta.chains:
        status = "done"
    elif counts.waiting > 0:
        status = "needs_initial_point"
    else:
        status = "warmup" if counts.warming > 0 else "sampling"
    return {"status": status, "done": status == "done"}


@dataclass
class _Round:
    """What one attempt at a request decided."""

    plans: dict[int, ChainPlan]
    updates: list[ChainUpdate]
    extra: int  # further chains to lease
    conflicts: list[int] = field(default_factory=list)  # request indices, by chain
    missing: dict[int, frozenset[int]] = field(default_factory=dict)


class Stepper:
    """The ask/tell loop over one store."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        chains: Chains,
        diagnostics: Diagnostics,
        refresh: Callable[[SessionMeta], Awaitable[SessionMeta]],
    ) -> None:
        self.store = store
        self.settings = settings
        self.chains = chains
        self.diagnostics = diagnostics
        #: The store's clock less this process's, as the store's last answer showed it:
        #: the leases of a round's evaluations are written in the store's time.
        self._clock = 0.0
        #: The session's metadata after the given one, which a chain showed out of date.
        self.refresh = refresh
        self._grants = LRU(10_000)  # open-ended sessions: iterations paid for

    def lease(self, lease_seconds: float | None) -> float:
        lease = lease_seconds if lease_seconds is not None else self.settings.default_lease_seconds
        if lease > self.settings.max_lease_seconds:
            raise Invalid(
                f"lease_seconds is over the limit of {self.settings.max_lease_seconds}",
                field="lease_seconds",
            )
        return lease

    def check_max(self, value: int) -> None:
        if value > self.settings.max_ask:
            raise Invalid(f"max is over the limit of {self.settings.max_ask}", field="max")

    def wait(self, wait_seconds: float) -> float:
        if wait_seconds > self.settings.max_wait_seconds:
            raise Invalid(
                f"wait_seconds is over the limit of {self.settings.max_wait_seconds}",
                field="wait_seconds",
            )
        return wait_seconds

    async def step(
        self,
        meta: SessionMeta,
        results: Sequence[Result],
        want: int,
        lease: float,
        request: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        """Tell ``results``, then lease up to ``want`` proposals: the told chains' next
        ones first, then free chains (or, for a ``request`` seen before, what it leased
        then: :meth:`Store.apply`). The outcomes, the proposals and the session's status,
        with ``next_lease_expires_at`` when no proposal was handed out."""
        told = parse(meta, results)
        by_chain: dict[int, list[Told]] = {}
        for t in told:
            by_chain.setdefault(t.pid.chain, []).append(t)
        unknown = [results[t.at].id for t in told if t.pid.chain >= meta.chains]
        if unknown:
            why = f"is not outstanding: the session has no such chain ({meta.chains} chains)"
            errors = [{"id": i, "message": f"proposal {i} {why}"} for i in unknown]
            raise Conflict(errors[0]["message"], ids=unknown, errors=errors)
        ids = [r.id for r in results]
        try:
            meta, plans, result, touched = await self._write(
                meta, by_chain, ids, want, lease, request
            )
        except SamplerFailed as exc:
            raise await self._stop(meta, exc, "nothing in this request was applied") from None
        outcomes = {i: o for plan in plans.values() for i, o in plan.outcomes.items()}
        answered = [
            {"id": r.id, "chain": t.pid.chain, "outcome": outcomes[t.at]}
            for r, t in zip(results, told, strict=True)
        ]
        try:
            if meta.sampler.round_size is not None:
                meta, proposals = await rounds_handed_out(
                    self.store,
                    self.chains,
                    self._decoded,
                    meta,
                    plans,
                    result,
                    want=want,
                    lease=lease,
                    request=request,
                    touched=touched,
                )
            else:
                meta, proposals = await self._handed_out_all(meta, plans, result)
        except SamplerFailed as exc:
            applied = "the results told in this request were applied (a retry says duplicate)"
            raise await self._stop(meta, exc, applied if results else "") from None
        stopped = result.stopped_by is not None
        written = _written(plans)
        if meta.max_iterations is None and not stopped:
            top = max((p.after.state.iteration for p in written), default=0)
            if not await self._paid_for(meta, top):
                stopped, proposals = True, []
        multiple = max((crossed(meta, p.after.state.iteration) for p in written), default=0)
        if multiple and not stopped and await self.diagnostics.check_rule(meta, multiple):
            # Met: the proposals leased by this very call are not handed out; nobody
            # leases them again.
            stopped, proposals = True, []
        status = session_status(meta, result.counts, stopped)
        expiry = result.next_expiry if want > 0 and not proposals and not status["done"] else None
        status["next_lease_expires_at"] = iso(expiry) if expiry is not None else None
        return answered, proposals, status

    async def _handed_out_all(
        self, meta: SessionMeta, plans: dict[int, ChainPlan], result: ApplyResult
    ) -> tuple[SessionMeta, list[dict[str, Any]]]:
        """Each leased chain's proposal, all in one batched ask."""
        leased = []
        for record in result.leased:
            plan = plans.get(record.chain)
            if plan and plan.after:
                leased.append(plan.after)
            else:
                meta, ch = await self._decoded(meta, record)
                leased.append(ch)
        asked = self.chains.proposals(meta, leased)
        return meta, [
            handed_out(ch, proposal, record.lease_until)
            for record, ch, proposal in zip(result.leased, leased, asked, strict=True)
        ]

    async def _decoded(
        self, meta: SessionMeta, record: ChainRecord
    ) -> tuple[SessionMeta, ChainView]:
        """A leased chain decoded, with the metadata it was written under."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return meta, await self.chains.decode(meta, record)
            except MetaChanged:
                meta = await self.refresh(meta)
        raise Busy("the session is revised too often; retry")

    async def _paid_for(self, meta: SessionMeta, iteration: int) -> bool:
        """Whether an open-ended session's reservation pays for its chains' draws up to
        ``iteration`` and a quarter of a step beyond, reserving a further step when it
        does not; when the quotas refuse, the session is stopped (``"quota"``)."""
        step = grant_step(meta.dim, meta.chains, len(meta.stats))
        need = iteration + step // 4
        if need <= int(self._grants.get(meta.id, 0)):
            return True
        target = (need // step + 1) * step
        per_iteration = iteration_bytes(meta.dim, meta.chains, len(meta.stats))
        whole = session_bytes(meta.algorithm, meta.dim, meta.chains, meta.params, target)
        try:
            if whole > self.settings.max_session_bytes:
                raise QuotaExceeded("session_bytes", whole, self.settings.max_session_bytes)
            granted = await self.store.grow(meta.id, target, per_iteration, quota_of(self.settings))
        except QuotaExceeded:
            await self.store.stop(meta.id, "quota")
            return False
        self._grants.put(meta.id, granted)
        return True

    async def _stop(self, meta: SessionMeta, exc: SamplerFailed, applied: str) -> SamplerFailed:
        """Stop a session whose sampler failed (no request meets the failure again: ask
        and step hand out nothing more), and the error to answer."""
        log.warning("session %s stopped: %s", meta.id, exc.detail, exc_info=exc.__cause__)
        await self.store.stop(meta.id, "sampler_error")
        detail = f"{exc.detail}; the session is stopped (stopped_by: sampler_error)"
        return SamplerFailed(f"{detail}; {applied}" if applied else detail, **exc.extra)

    async def _write(
        self,
        meta: SessionMeta,
        by_chain: dict[int, list[Told]],
        ids: Sequence[str],
        want: int,
        lease: float,
        request: str | None = None,
    ) -> tuple[SessionMeta, dict[int, ChainPlan], ApplyResult, list[ChainView]]:
        """Decide and write, until the store takes the write; the metadata decided on
        (``meta``, or a later revision that a chain showed), the plans and what the store
        did."""
        verified: set[int] = set()  # chains read from the store in this request
        reload: set[int] = set()
        history: dict[int, dict[int, float]] = {}
        for _ in range(MAX_ATTEMPTS):
            try:
                current = await self.chains.current(meta, list(by_chain), reload, verified)
            except MetaChanged:
                meta = await self.refresh(meta)
                reload, verified = set(by_chain), set()
                continue
            decided = self._decide(meta, current, by_chain, history, want, lease, request)
            reload = {c for c in decided.plans if decided.plans[c].conflicts} - verified
            if reload:
                continue  # decided on a cached state: the chain may have moved on elsewhere
            if decided.missing:
                await self._read_history(meta, decided.missing, history)
                continue
            if decided.conflicts:
                raise refusal(meta, decided.conflicts, ids, by_chain, current)
            result = await self.store.apply(
                meta.id,
                decided.updates,
                lease=decided.extra,
                lease_seconds=lease,
                exclude=list(by_chain),
                request=request,
            )
            self._clock = result.now - time.time()
            if not result.conflicts:
                for plan in _written(decided.plans):
                    self.chains.remember(meta, plan.after)
                touched = [
                    after if (after := decided.plans[c].after) is not None else current[c]
                    for c in by_chain
                ]
                return meta, decided.plans, result, touched
            try:
                for chain, record in result.conflicts.items():
                    await self.chains.decode(meta, record)  # refresh the cache, decide again
                    verified.add(chain)
            except MetaChanged:
                meta = await self.refresh(meta)
                reload, verified = set(by_chain), set()
        raise Busy("too much contention on these chains; retry")

    def _decide(
        self,
        meta: SessionMeta,
        current: dict[int, ChainView],
        by_chain: dict[int, list[Told]],
        history: dict[int, dict[int, float]],
        want: int,
        lease: float,
        request: str | None,
    ) -> _Round:
        """One decision of the whole request on ``current`` (:func:`.decide.decide`)."""
        rounds = meta.sampler.round_size is not None
        common: dict[str, Any] = {
            "history": history,
            "proposal": lambda ch: self.chains.proposal(meta, ch),
            "lease": lease,
            "budget": want,
        }
        if rounds:  # its evaluations leased one by one, on the store's clock
            common.update(now=time.time() + self._clock, request=request)
        plans = (decide_rounds if rounds else decide)(meta, current, by_chain, **common)
        decided = _Round(plans, [], 0)
        leasing = 0
        for chain, plan in plans.items():
            decided.conflicts += plan.conflicts
            if plan.missing:
                decided.missing[chain] = plan.missing
            if plan.update is not None:
                decided.updates.append(plan.update)
                leasing += len(plan.handed) if rounds else plan.update.lease_seconds > 0
        # One chain per evaluation still wanted, as for any sampler: a chain with rounds
        # may have one evaluation to give (its initial point, warm-up's one at a time),
        # and those given none are released by the write that records what the others
        # hand out (_record_out).
        decided.extra = max(0, want - leasing)
        return decided

    async def _read_history(
        self,
        meta: SessionMeta,
        missing: dict[int, frozenset[int]],
        history: dict[int, dict[int, float]],
    ) -> None:
        for chain, iterations in missing.items():
            known = history.setdefault(chain, {})
            for iteration in iterations:
                known[iteration] = await told_value(self.store, meta, chain, iteration)

    async def reset_chain(
        self, meta: SessionMeta, chain: int, initial: Sequence[float]
    ) -> ChainView:
        """Give a chain that waits for its initial point a new one; the chain after."""
        if not 0 <= chain < meta.chains:
            raise NotFound(f"no chain {chain} in this session")
        if len(initial) != meta.dim:
            raise Invalid(f"initial must have {meta.dim} values", field="initial")
        for _ in range(MAX_ATTEMPTS):
            (ch,) = await self.chains.load(meta, [chain])
            if ch.state.logdensity is not None:
                raise Conflict(
                    f"chain {chain} has a current state; only a chain waiting for its "
                    "initial point can be given a new one"
                )
            state = reset(ch.state, initial)
            hot, _ = encode_state(state, True, False, meta.revision)
            update = ChainUpdate(chain, ch.version, hot, True, counts=Counts(waiting=-ch.waiting))
            result = await self.store.apply(meta.id, [update])
            if chain in result.applied:
                new = ChainView(
                    chain,
                    ch.version + 1,
                    state,
                    ch.cold_version,
                    None,
                    ch.draws,
                    ch.inits,
                    True,
                    meta.revision,
                )
                self.chains.remember(meta, new)
                return new
        raise Busy("too much contention on this chain; retry")


def _written(plans: dict[int, ChainPlan]) -> list[Any]:
    """The plans that write."""
    return [p for p in plans.values() if p.after is not None]
