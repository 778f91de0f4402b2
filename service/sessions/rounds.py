"""Chains with rounds (:mod:`kameleon.core.populations.rounds`): a round's evaluations handed out
together, each under a lease of its own, their results taken in any order and applied
in the chain's.

A chain with rounds keeps, in its hot record, the results told ahead of its outstanding
evaluation (``held``: kept until those before them are told) and the lease of each
evaluation of its round handed out and not told (``leases``: until when, on the store's
clock, and for which ``request_id``). The chain's lease in the store says when the chain
next has something to hand out: now (0) while an evaluation of its round is neither
told nor leased, else when the first of its evaluations' leases runs out. Deciding a
request on such a chain:

1. Each told result is judged as for any chain (:func:`.verdicts.classify`) when it is
   for the outstanding evaluation, one before it or the initial point; one for a later
   evaluation of the round is *held* (or, held before, a ``duplicate`` or a
   ``conflict`` by its value); one beyond the round was never issued (``conflict``).
2. The outstanding evaluation's result is applied, then every held result that follows
   it in the chain's order, each through the sampler's ``tell``: the draws are those of
   the same results told one by one (one row each, all in one write).
3. The round's evaluations that are neither held nor under a running lease go to the
   request, up to its ``max``, each leased to it; the chain's lease is set as above.

A chain that a request leases from the free ones (:meth:`Stepper.step`) hands out the
same way, in a second write. A lease that runs out makes its evaluation free again: the
next ask hands it out, with the same id and point. A retried request (its
``request_id``) gets back the evaluations still leased to it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from kameleon.service.core_api import (
    Parts,
    Proposal,
    round_offset,
    round_proposals,
    round_size,
    takes_steps,
    tell_one,
    transition_stats,
)
from kameleon.service.sessions.chains import ChainView, Held, PointLease
from kameleon.service.sessions.decide import ChainPlan, chain_active, initial_told, write_chain
from kameleon.service.sessions.errors import guarded
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.rows import RowLayout
from kameleon.service.sessions.verdicts import Classified, Told, classify

__all__ = ["decide_rounds", "handable", "lease_plan", "position"]

Position = tuple[int, int]

#: The gradients given with held parts: none is used (a sampler with rounds asks for none).
_UNUSED: dict[int, np.ndarray] = {}


def position(proposal: Proposal) -> Position:
    return (proposal.iteration, proposal.step)


def _issued(meta: SessionMeta, proposal: Proposal) -> bool:
    """Whether the session's end leaves ``proposal`` to be handed out."""
    return meta.max_iterations is None or proposal.iteration <= meta.max_iterations


def _places(meta: SessionMeta, chain: ChainView, state: object) -> tuple[Proposal, list[Position]]:
    """The chain's outstanding proposal, and the places of its round's evaluations
    within the session, in order (the first is the outstanding one's)."""
    sampler, params = meta.sampler, meta.params
    first = guarded(chain.chain, functools.partial(sampler.ask, state, params))
    size = guarded(chain.chain, functools.partial(round_size, sampler, state, params))
    if takes_steps(sampler):
        places = [(first.iteration, first.step + k) for k in range(size)]
    else:
        places = [(first.iteration + k, 0) for k in range(size)]
    if meta.max_iterations is not None:
        places = [p for p in places if p[0] <= meta.max_iterations]
    return first, places


def handable(
    meta: SessionMeta,
    chain: ChainView,
    state: object,
    held: Sequence[Held],
    leases: Sequence[PointLease],
    now: float,
    limit: int | None = None,
) -> list[Proposal]:
    """The evaluations of the chain's round (in ``state``) that can be handed out at
    ``now``, at most ``limit``: not held, not under a lease running at ``now``, within
    the session. Only those are asked for."""
    first, places = _places(meta, chain, state)
    return _asked(meta, chain, state, first, _free(places, held, leases, now)[:limit])


def _asked(
    meta: SessionMeta, chain: ChainView, state: object, first: Proposal, ks: Sequence[int]
) -> list[Proposal]:
    """The proposals ``ks`` evaluations after the outstanding one (``first``)."""
    sampler, params = meta.sampler, meta.params
    return [
        first
        if k == 0
        else guarded(
            chain.chain, functools.partial(round_proposals, sampler, state, params, k, k + 1)
        )[0]
        for k in ks
    ]


def _free(
    places: Sequence[Position], held: Sequence[Held], leases: Sequence[PointLease], now: float
) -> list[int]:
    """Which of ``places`` (their indices) are neither held nor leased at ``now``."""
    taken = {(h.iteration, h.step) for h in held}
    taken |= {(x.iteration, x.step) for x in leases if x.until > now}
    return [k for k, place in enumerate(places) if place not in taken]


def lease_plan(
    meta: SessionMeta,
    chain: ChainView,
    state: object,
    held: Sequence[Held],
    leases: Sequence[PointLease],
    now: float,
    *,
    give: int,
    seconds: float,
    request: str | None,
) -> tuple[list[Proposal], tuple[PointLease, ...], float]:
    """What a chain with rounds (in ``state``) hands out at ``now``, at most ``give``
    evaluations each leased for ``seconds`` to ``request``; its evaluations' leases
    after that (those of evaluations still to tell, ahead of ``state``); and the lease
    seconds to write for the chain in the store (0: it has more to hand out now)."""
    first, places = _places(meta, chain, state)
    free = _free(places, held, leases, now)[:give] if give > 0 else []
    given = _asked(meta, chain, state, first, free)
    front = position(first)
    heldat = {(h.iteration, h.step) for h in held}
    replaced = {position(p) for p in given}
    kept = [
        x
        for x in leases
        if (x.iteration, x.step) >= front
        and (x.iteration, x.step) not in heldat
        and (x.iteration, x.step) not in replaced
    ]
    kept += [PointLease(p.iteration, p.step, now + seconds, request) for p in given]
    kept.sort(key=lambda x: (x.iteration, x.step))
    more = bool(_free(places, held, kept, now))
    running = [x.until for x in kept if x.until > now]
    store_seconds = 0.0 if more or not running else max(1e-3, min(running) - now)
    return given, tuple(kept), store_seconds


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a == b or (math.isnan(a) and math.isnan(b))


def _held(t: Told) -> Held:
    parts = t.parts
    return Held(
        t.pid.iteration,
        t.pid.step,
        t.value,
        None if parts is None else parts.log_prior,
        None if parts is None else parts.log_likelihood,
    )


def _same_result(h: Held, t: Told) -> bool:
    """Whether ``t`` tells what ``h`` holds: the same value and, when both give them,
    the same parts (as any retry is judged by its value)."""
    other = _held(t)
    if h.log_prior is None or other.log_prior is None:
        return _same(h.value, other.value)
    return (
        _same(h.value, other.value)
        and _same(h.log_prior, other.log_prior)
        and _same(h.log_likelihood, other.log_likelihood)
    )


def _judge(
    meta: SessionMeta,
    chain: ChainView,
    told: Sequence[Told],
    history: Mapping[int, float],
    outstanding: Proposal | None,
) -> tuple[Classified, dict[Position, Told]]:
    """Step 1 of the module docstring for one chain: the judgement, and the results
    newly held (by place)."""
    state = chain.state
    held = {(h.iteration, h.step): h for h in chain.held}
    ahead: dict[Position, Told] = {}
    outcomes: dict[int, str] = {}
    conflicts: list[int] = []
    rest: list[Told] = []
    # A chain that is done has no round: what is told for it is judged as for any chain.
    done = outstanding is None or meta.is_done(state)
    size = 0 if done else round_size(meta.sampler, state, meta.params)
    for t in told:
        pid = t.pid
        k = (
            0
            if outstanding is None or done or pid.iteration == 0 or pid.epoch != state.epoch
            else round_offset(meta.sampler, state, outstanding, pid.iteration, pid.step)
        )
        if k <= 0:
            rest.append(t)
            continue
        place = (pid.iteration, pid.step)
        if k >= size or (meta.max_iterations is not None and pid.iteration > meta.max_iterations):
            conflicts.append(t.at)  # never issued: beyond the round, or the session's end
        elif place in held:
            outcomes[t.at] = "duplicate" if _same_result(held[place], t) else "conflict"
        elif place in ahead:
            same = _same_result(_held(ahead[place]), t)
            outcomes[t.at] = "duplicate" if same else "conflict"
        else:
            ahead[place] = t
            outcomes[t.at] = "held"
    conflicts += [at for at, verdict in outcomes.items() if verdict == "conflict"]
    outcomes = {at: v for at, v in outcomes.items() if v != "conflict"}
    steps = takes_steps(meta.sampler)
    judged = classify(meta, chain, rest, history, outstanding if steps else None)
    return (
        Classified(
            {**outcomes, **judged.outcomes},
            tuple(sorted((*conflicts, *judged.conflicts))),
            judged.missing,
            judged.apply,
        ),
        ahead,
    )


def decide_rounds(
    meta: SessionMeta,
    current: Mapping[int, ChainView],
    by_chain: Mapping[int, Sequence[Told]],
    *,
    history: Mapping[int, Mapping[int, float]],
    proposal: Callable[[ChainView], Proposal],
    lease: float = 0.0,
    budget: int = 0,
    now: float = 0.0,
    request: str | None = None,
) -> dict[int, ChainPlan]:
    """:func:`.decide.decide` for a sampler with rounds: the module docstring's steps;
    ``budget`` counts the evaluations to hand out (:attr:`ChainPlan.handed`), each
    leased for ``lease`` seconds from ``now`` (the store's clock, as this process
    reckons it) to ``request``."""
    judged: dict[int, tuple[Classified, dict[Position, Told]]] = {}
    for c, told in by_chain.items():
        ch = current[c]
        outstanding = proposal(ch) if ch.state.logdensity is not None else None
        judged[c] = _judge(meta, ch, told, history.get(c, {}), outstanding)
    if any(k.conflicts or k.missing for k, _ in judged.values()):
        return {
            c: ChainPlan(k.outcomes, k.conflicts, missing=k.missing) for c, (k, _) in judged.items()
        }
    plans: dict[int, ChainPlan] = {}
    for c, (k, ahead) in judged.items():
        plan = _plan(meta, current[c], k, ahead, lease, budget, now, request)
        budget -= len(plan.handed)
        plans[c] = plan
    return plans


def _plan(
    meta: SessionMeta,
    chain: ChainView,
    judged: Classified,
    ahead: dict[Position, Told],
    lease: float,
    budget: int,
    now: float,
    request: str | None,
) -> ChainPlan:
    """Steps 2 and 3 for one chain."""
    sampler, params = meta.sampler, meta.params
    state = chain.state
    outcomes = dict(judged.outcomes)
    held = {(h.iteration, h.step): h for h in chain.held}
    told_at = {place: t.at for place, t in ahead.items()}
    held.update({place: _held(t) for place, t in ahead.items()})
    if judged.apply is None and not ahead:
        return ChainPlan(outcomes, ())
    rows: list[bytes] = []
    new = state
    init_value, init_told = chain.init_value, False
    if judged.apply is not None:
        t = judged.apply
        p = guarded(chain.chain, lambda: sampler.ask(state, params))
        new, info = guarded(
            chain.chain,
            lambda: tell_one(sampler, state, params, p, t.value, t.gradient, t.parts, t.draw),
        )
        outcomes[t.at] = info.outcome
        if info.outcome in ("initialized", "outside_support"):
            new, init_value = initial_told(meta, chain, t.value, new, info.outcome)
            init_told = True
        elif info.outcome != "step":
            rows.append(_row(meta, t.value, new, info.outcome))
    while held and new.logdensity is not None and not meta.is_done(new):
        nxt = guarded(chain.chain, functools.partial(sampler.ask, new, params))
        h = held.pop(position(nxt), None)
        if h is None:
            break
        tell = functools.partial(
            tell_one, sampler, new, params, nxt, h.value, None, _parts(meta, h)
        )
        new, info = guarded(chain.chain, tell)
        if position(nxt) in told_at:
            outcomes[told_at[position(nxt)]] = info.outcome
        if info.outcome != "step":
            rows.append(_row(meta, h.value, new, info.outcome))
    kept = tuple(held[place] for place in sorted(held))
    active = chain_active(meta, new, init_value)
    leases = chain.leases if new.epoch == state.epoch else ()  # a new initial point's
    give: list[Proposal] = []
    if active:
        give, leases, lease_seconds = lease_plan(
            meta, chain, new, kept, leases, now, give=budget, seconds=lease, request=request
        )
    else:
        leases, lease_seconds = (), 0.0
    update, after = write_chain(
        meta,
        chain,
        new,
        init_value,
        b"".join(rows) if rows else None,
        init_told,
        lease_seconds,
        rows=len(rows),
        held=kept,
        leases=leases,
    )
    return ChainPlan(outcomes, judged.conflicts, update, after, handed=tuple(give))


def _parts(meta: SessionMeta, h: Held) -> Parts | None:
    if h.log_prior is None or h.log_likelihood is None:
        return None
    unused = _UNUSED.get(meta.dim)
    if unused is None:
        unused = np.full(meta.dim, math.nan)
        unused.flags.writeable = False
        _UNUSED[meta.dim] = unused
    return Parts(h.log_prior, h.log_likelihood, unused, unused)


def _row(meta: SessionMeta, value: float, state: object, outcome: str) -> bytes:
    return RowLayout.pack(
        value,
        state.logdensity,  # type: ignore[attr-defined]
        outcome == "accepted",
        state.position,  # type: ignore[attr-defined]
        transition_stats(meta.sampler, state),
    )
