"""The exactly-once decision: what told results do to a session's chains. Pure: no I/O,
no clock.

One way in, three steps:

1. :func:`~kameleon.service.sessions.verdicts.classify` judges each told result against
   its chain, without the sampler: ``apply`` (the proposal the chain waits for),
   ``duplicate`` (told before with this value), ``conflict`` (told before with another
   value, or never issued) or ``missing`` (applied in an earlier request, whose value
   only the store has: the plan names those iterations, and the caller reads them and
   decides again with ``history``). A chain moves at most once per request: the proposal
   after a transition is issued by no one until it is handed out.
2. :func:`transition` makes every chain's transition in one batched tell
   (:func:`core.running.batch.tell_many`, which steps chain by chain where a sampler cannot
   batch); a sampler that fails is named by its chain.
3. :func:`decide` turns each chain's transition into the write to make
   (:class:`ChainPlan`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from kameleon.service.core_api import (
    Memo,
    Proposal,
    StepInfo,
    cold_changed,
    redraw,
    takes_steps,
    tell_many,
    tell_one,
    transition_stats,
)
from kameleon.service.sessions.chains import ChainView, Held, PointLease, encode_state
from kameleon.service.sessions.draws import RowLayout
from kameleon.service.sessions.errors import guarded
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.verdicts import Classified, Told, classify
from kameleon.service.store.records import ChainUpdate, Counts

__all__ = [
    "ChainPlan",
    "chain_active",
    "decide",
    "initial_told",
    "plan_chain",
    "transition",
    "write_chain",
]


class ChainPlan(NamedTuple):
    """What told results do to one chain.

    ``outcomes`` maps the request index of each result decided to its outcome;
    ``conflicts`` lists the request indices of results for proposals that are not
    outstanding. ``update`` is the write to make (``None``: nothing changes) and
    ``after`` the chain once it is made. ``missing``: iterations whose told values the
    decision needs (see :func:`~kameleon.service.sessions.verdicts.classify`); when not empty, decide again with them.
    """

    outcomes: dict[int, str]
    conflicts: tuple[int, ...]
    update: ChainUpdate | None = None
    after: ChainView | None = None
    missing: frozenset[int] = frozenset()
    #: A chain with rounds: the evaluations its update leases to the request
    #: (:mod:`.rounds`).
    handed: tuple[Proposal, ...] = ()


_Transition = tuple[Any, StepInfo]


def transition(
    meta: SessionMeta,
    chains: Sequence[ChainView],
    told: Sequence[Told],
    proposals: Sequence[Proposal],
) -> list[_Transition]:
    """Step 2: each chain's transition with its told value from its outstanding
    proposal, in one batched tell; when that fails, chain by chain, so that the failure
    names its chain (:class:`~.errors.SamplerFailed`)."""
    sampler, params = meta.sampler, meta.params
    values = [t.value for t in told]
    gradients = [t.gradient for t in told]
    parts = [t.parts for t in told]
    draws = [t.draw for t in told]
    states = [ch.state for ch in chains]
    try:
        return tell_many(
            sampler,
            states,
            params,
            proposals,
            values,
            gradients=gradients,
            parts=parts,
            conditional_draws=draws,
        )
    except Exception:
        return [
            guarded(
                ch.chain,
                lambda ch=ch, p=p, t=t: tell_one(  # type: ignore[misc]
                    sampler, ch.state, params, p, t.value, t.gradient, t.parts, t.draw
                ),
            )
            for ch, p, t in zip(chains, proposals, told, strict=True)
        ]


def decide(
    meta: SessionMeta,
    current: Mapping[int, ChainView],
    by_chain: Mapping[int, Sequence[Told]],
    *,
    history: Mapping[int, Mapping[int, float]],
    proposal: Callable[[ChainView], Proposal],
    lease: float = 0.0,
    budget: int = 0,
) -> dict[int, ChainPlan]:
    """The plans of a request's told results, ``by_chain`` (in request order per chain),
    against the chains as ``current``: the three steps of the module docstring.

    ``proposal(chain)`` is a chain's outstanding proposal. The first ``budget`` chains
    that move and stay active lease their next proposal for ``lease`` seconds. When
    any result is a conflict or needs history, nothing is stepped: the request is
    refused, or decided again.
    """
    steps = takes_steps(meta.sampler)  # transitions of several evaluations
    judged = {
        c: classify(
            meta,
            current[c],
            told,
            history.get(c, {}),
            proposal(current[c]) if steps and current[c].state.logdensity is not None else None,
        )
        for c, told in by_chain.items()
    }
    if any(k.conflicts or k.missing for k in judged.values()):
        return {c: ChainPlan(k.outcomes, k.conflicts, missing=k.missing) for c, k in judged.items()}
    moving = [c for c, k in judged.items() if k.apply is not None]
    stepped = dict(
        zip(
            moving,
            transition(
                meta,
                [current[c] for c in moving],
                [judged[c].apply for c in moving],  # type: ignore[misc]
                [proposal(current[c]) for c in moving],
            ),
            strict=True,
        )
    )
    plans: dict[int, ChainPlan] = {}
    for c, k in judged.items():
        if k.apply is None:
            plans[c] = ChainPlan(k.outcomes, ())
            continue
        new, info = stepped[c]
        plan = _plan(meta, current[c], k, new, info, lease if budget > 0 else 0.0)
        budget -= plan.update is not None and plan.update.lease_seconds > 0
        plans[c] = plan
    return plans


def _plan(
    meta: SessionMeta,
    chain: ChainView,
    judged: Classified,
    new: Any,
    info: StepInfo,
    lease: float,
) -> ChainPlan:
    """Step 3: the write of one chain's transition (step 2's ``new`` and ``info``)."""
    assert judged.apply is not None
    told = judged.apply
    outcomes = {**judged.outcomes, told.at: info.outcome}
    draw: bytes | None = None
    init_value = chain.init_value
    init_told = False
    if info.outcome in ("initialized", "outside_support"):
        new, init_value = initial_told(meta, chain, told.value, new, info.outcome)
        init_told = True
    elif info.outcome != "step":  # "step": an evaluation within a transition, no draw
        draw = RowLayout.pack(
            told.value,
            new.logdensity,
            info.outcome == "accepted",
            new.position,
            transition_stats(meta.sampler, new),
        )
    update, after = write_chain(meta, chain, new, init_value, draw, init_told, lease)
    return ChainPlan(outcomes, judged.conflicts, update, after)


def initial_told(
    meta: SessionMeta, chain: ChainView, value: float, new: Any, outcome: str
) -> tuple[Any, float | None]:
    """The chain after its initial point was told ``value`` (``outcome``: initialized,
    or outside_support), and the init value it keeps: a point outside the support is
    replaced by the chain's next drawn point (a new epoch, whose value is not told yet),
    if it has one left and was not given by a reset."""
    if outcome == "outside_support" and not chain.given:
        new = (
            redraw(
                new,
                center=meta.center(chain.chain),
                radius=meta.initial_radius,
                max_attempts=meta.max_initial_attempts,
            )
            or new
        )
    return new, (value if new.epoch == chain.state.epoch else None)


def plan_chain(
    meta: SessionMeta,
    chain: ChainView,
    told: Sequence[Told],
    *,
    lease: float = 0.0,
    history: Mapping[int, float] | None = None,
    outstanding: Proposal | None = None,
) -> ChainPlan:
    """:func:`decide` for one chain (``outstanding``: its proposal, if known)."""

    def proposal(ch: ChainView) -> Proposal:
        if outstanding is not None:
            return outstanding
        return guarded(ch.chain, lambda: meta.sampler.ask(ch.state, meta.params))

    plans = decide(
        meta,
        {chain.chain: chain},
        {chain.chain: told},
        history={chain.chain: history or {}},
        proposal=proposal,
        lease=lease,
        budget=1,
    )
    return plans[chain.chain]


def write_chain(
    meta: SessionMeta,
    chain: ChainView,
    state: Any,
    init_value: float | None,
    draw: bytes | None,
    init_told: bool,
    lease: float,
    *,
    rows: int = 1,
    held: tuple[Held, ...] = (),
    leases: tuple[PointLease, ...] = (),
) -> tuple[ChainUpdate, ChainView]:
    """The write that takes ``chain`` to ``state`` (``draw``: ``rows`` rows, or
    ``None``; ``held`` and ``leases``: a chain with rounds, :mod:`.rounds`), and the
    chain after it."""
    changed = cold_changed(chain.state, state)
    memo: Memo = {}
    hot, cold = encode_state(
        state,
        chain.given,
        changed,
        meta.revision,
        memo=memo,
        kept=chain.encoded,
        held=held,
        leases=leases,
    )
    after = ChainView(
        chain.chain,
        chain.version + 1,
        state,
        chain.cold_version + (cold is not None),
        init_value,
        chain.draws + (rows if draw is not None else 0),
        chain.inits + init_told,
        chain.given,
        meta.revision,
        memo,
        held,
        leases,
    )
    active = chain_active(meta, state, init_value)
    update = ChainUpdate(
        chain.chain,
        chain.version,
        hot,
        active,
        cold,
        draw,
        init_value,
        lease if active else 0.0,
        init_told=init_told,
        rows=rows,
        counts=Counts(
            warming=-(chain.state.iteration < meta.warmup <= state.iteration),
            finished=int(not meta.is_done(chain.state) and meta.is_done(state)),
            waiting=after.waiting - chain.waiting,
        ),
    )
    return update, after


def chain_active(meta: SessionMeta, state: Any, init_value: float | None) -> bool:
    """Whether a chain in ``state`` has a proposal to hand out."""
    if state.logdensity is None:
        return init_value is None
    return not meta.is_done(state)
