"""Leases handed back or renewed: ``POST /v1/sessions/{id}/leases``.

A lease is not held by anyone in particular: it says until when the service will not
hand a proposal out again. Renewing sets it to run out ``lease_seconds`` from now; handing
back (``lease_seconds`` 0) ends it now, so the next ask hands the same proposal (same id,
same point) to another worker at once. Either is a compare-and-set write of the chain's
record with its state unchanged, so it cannot race a tell: whichever the store takes
first stands, and a proposal told meanwhile is no longer outstanding (409).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kameleon.service.core_api import takes_steps
from kameleon.service.ids import ProposalId, parse_id
from kameleon.service.sessions.chains import Chains, ChainView, PointLease, encode_state
from kameleon.service.sessions.errors import Busy, Invalid, guarded
from kameleon.service.sessions.handout import iso
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.rounds import handable, lease_plan
from kameleon.service.sessions.stepping import MAX_ATTEMPTS, session_status
from kameleon.service.sessions.told import conflict
from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainUpdate

__all__ = ["set_leases"]

OBSOLETE = "is not outstanding: its chain never issued it, or a reset made it obsolete"


async def set_leases(
    store: Store, chains: Chains, meta: SessionMeta, ids: Sequence[str], seconds: float
) -> dict[str, Any]:
    """Renew (``seconds`` > 0) or hand back (0) the leases of the outstanding proposals
    ``ids``; the answer (``schemas.LeasesResponse``). One id that is not outstanding
    refuses the whole request (409) and changes nothing."""
    pids = _parse(ids)
    wanted = sorted({p.chain for p in pids if p.chain < meta.chains})
    for _ in range(MAX_ATTEMPTS):
        current = {ch.chain: ch for ch in await chains.load(meta, wanted)}
        refused = [
            (ids[i], why)
            for i, p in enumerate(pids)
            if (why := _not_outstanding(meta, current.get(p.chain), p)) is not None
        ]
        if refused:
            raise conflict(refused)
        if meta.sampler.round_size is not None:
            now = (await store.apply(meta.id, [])).now  # the store's clock
            relet = {c: _relet(meta, current[c], pids, seconds, now) for c in wanted}
            updates = [update for update, _ in relet.values()]
        else:
            updates = [_rewrite(meta, current[c], seconds) for c in wanted]
        result = await store.apply(meta.id, updates)
        if result.conflicts:
            continue  # a chain moved on meanwhile: judge the ids again
        if meta.sampler.round_size is not None:
            point: dict[tuple[int, int, int], float] = {}
            for c, (_, after) in relet.items():
                chains.remember(meta, after)
                point.update({(c, x.iteration, x.step): x.until for x in after.leases})
            ends = [point.get((p.chain, p.iteration, p.step)) for p in pids]
        else:
            for c in wanted:
                chains.rewritten(meta, current[c])
            until = {r.chain: r.lease_until for r in result.leased}
            ends = [until.get(p.chain) for p in pids]
        leases = [
            {"id": ids[i], "chain": p.chain, "lease_expires_at": None if end is None else iso(end)}
            for i, (p, end) in enumerate(zip(pids, ends, strict=True))
        ]
        return {
            "leases": leases,
            **session_status(meta, result.counts, result.stopped_by is not None),
        }
    raise Busy("too much contention on these chains; retry")


def _parse(ids: Sequence[str]) -> list[ProposalId]:
    pids = []
    for i, text in enumerate(ids):
        pid = parse_id(text)
        if pid is None:
            raise Invalid(f"ids[{i}]: {text!r} is not a proposal id", field=f"ids.{i}")
        pids.append(pid)
    return pids


def _not_outstanding(meta: SessionMeta, ch: ChainView | None, pid: ProposalId) -> str | None:
    """Why ``pid`` is not the proposal ``ch`` (``None``: no such chain) waits for, or
    ``None`` if it is."""
    if ch is None:
        return f"is not outstanding: the session has no such chain ({meta.chains} chains)"
    state = ch.state
    told = "is not outstanding: it was told already"
    if pid.iteration == 0:
        if pid.epoch != state.epoch:
            return OBSOLETE
        return None if state.logdensity is None and ch.init_value is None else told
    if state.logdensity is None:
        return OBSOLETE
    if pid.iteration <= state.iteration:
        return told
    if meta.sampler.round_size is not None:
        return _not_in_round(meta, ch, pid)
    if pid.iteration == state.iteration + 1 and not meta.is_done(state):
        if not takes_steps(meta.sampler):
            return None if pid.step == 0 else OBSOLETE
        step = guarded(ch.chain, lambda: meta.sampler.ask(state, meta.params)).step
        if pid.step < step:
            return told
        return None if pid.step == step else OBSOLETE
    return OBSOLETE


def _not_in_round(meta: SessionMeta, ch: ChainView, pid: ProposalId) -> str | None:
    """:func:`_not_outstanding` for a chain with rounds: an evaluation of its round from
    the outstanding one on whose result is not held is outstanding."""
    if pid.epoch != ch.state.epoch or meta.is_done(ch.state):
        return OBSOLETE
    if any((h.iteration, h.step) == (pid.iteration, pid.step) for h in ch.held):
        return "is not outstanding: it was told already"
    if any(
        (p.iteration, p.step) == (pid.iteration, pid.step)
        for p in handable(meta, ch, ch.state, ch.held, (), 0.0)
    ):
        return None
    if pid.iteration == ch.state.iteration + 1 and takes_steps(meta.sampler):
        step = guarded(ch.chain, lambda: meta.sampler.ask(ch.state, meta.params)).step
        if pid.step < step:
            return "is not outstanding: it was told already"
    return OBSOLETE


def _relet(
    meta: SessionMeta, ch: ChainView, pids: Sequence[ProposalId], seconds: float, now: float
) -> tuple[ChainUpdate, ChainView]:
    """A chain with rounds with the leases of its evaluations among ``pids`` renewed to
    ``seconds`` from ``now`` (or, for 0, ended: each may be handed out again at once),
    its lease in the store set to when it next has something to hand out; the chain
    after."""
    places = {(p.iteration, p.step) for p in pids if p.chain == ch.chain}
    by_place = {(x.iteration, x.step): x for x in ch.leases}
    for place in places:
        old = by_place.pop(place, None)
        if seconds > 0:
            request = None if old is None else old.request
            by_place[place] = PointLease(place[0], place[1], now + seconds, request)
    leases = tuple(by_place[k] for k in sorted(by_place))
    _, leases, store_seconds = lease_plan(
        meta, ch, ch.state, ch.held, leases, now, give=0, seconds=0.0, request=None
    )
    hot, _ = encode_state(
        ch.state, ch.given, False, meta.revision, kept=ch.encoded, held=ch.held, leases=leases
    )
    update = ChainUpdate(
        ch.chain, ch.version, hot, True, init_value=ch.init_value, lease_seconds=store_seconds
    )
    return update, dataclasses.replace(ch, version=ch.version + 1, leases=leases)


def _rewrite(meta: SessionMeta, ch: ChainView, seconds: float) -> ChainUpdate:
    """The chain's record as it is, its lease set to ``seconds`` from now (0: released)."""
    hot, _ = encode_state(
        ch.state, ch.given, False, meta.revision, kept=ch.encoded, held=ch.held, leases=ch.leases
    )
    return ChainUpdate(
        ch.chain, ch.version, hot, True, init_value=ch.init_value, lease_seconds=seconds
    )
