"""The exactly-once decision: what told results do to one chain. Pure: no I/O, no clock.

:func:`plan_chain` classifies each result told for a chain against the chain's state
(apply it, call it a duplicate, or a conflict), runs the sampler's transitions for those
applied, and says what to write. A result for a transition applied in an earlier request
is judged against the value told then, which only the store has: the plan names those
iterations in ``missing``, and the caller reads them and plans again with ``history``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kameleon.core.base import Proposal, StepInfo
from kameleon.core.batch import tell_many
from kameleon.core.initial import redraw
from kameleon.core.serialization import cold_changed
from kameleon.service.ids import ProposalId
from kameleon.service.sessions.chains import ChainView, encode_state
from kameleon.service.sessions.draws import RowLayout
from kameleon.service.sessions.errors import guarded
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import ChainUpdate, Counts

__all__ = ["ChainPlan", "Told", "chain_active", "plan_chain", "steady", "step_steady"]


class Told(NamedTuple):
    """One told result: its place in the request, its proposal id, its value."""

    at: int
    pid: ProposalId
    value: float


class ChainPlan(NamedTuple):
    """What told results do to one chain.

    ``outcomes`` maps the request index of each result decided to its outcome;
    ``conflicts`` lists the request indices of results for proposals that are not
    outstanding. ``update`` is the write to make (``None``: nothing changes) and
    ``after`` the chain once it is made. ``missing``: iterations whose told values the
    decision needs (see :func:`plan_chain`); when not empty, plan again with them.
    """

    outcomes: dict[int, str]
    conflicts: tuple[int, ...]
    update: ChainUpdate | None = None
    after: ChainView | None = None
    missing: frozenset[int] = frozenset()


_Transition = tuple[Any, StepInfo, bool]  # new state, what happened, accepted


def plan_chain(
    meta: SessionMeta,
    chain: ChainView,
    told: Sequence[Told],
    *,
    lease: float = 0.0,
    history: Mapping[int, float] | None = None,
    outstanding: Proposal | None = None,
    stepped: tuple[Any, StepInfo] | None = None,
) -> ChainPlan:
    """Decide ``told`` (results for ``chain``, in request order) against ``chain``.

    ``lease`` > 0: the update leases the chain's next proposal for that long.
    ``history``: told values of transitions applied before, by iteration.
    ``outstanding``: the chain's current proposal if known (else it is asked again).
    ``stepped``: the sampler's transition for the first told result, when the caller
    stepped it already (:func:`steady` says when it may, :func:`step_steady` does it
    for many chains at once).
    """
    history = history or {}
    state, init_value = chain.state, chain.init_value
    told_here: dict[tuple[int, int], float] = {}
    outcomes: dict[int, str] = {}
    conflicts: list[int] = []
    missing: set[int] = set()
    draw: bytes | None = None
    init_told = False
    for t in told:
        outcome, new = _decide(
            meta, chain, state, init_value, t, told_here, history, outstanding, stepped
        )
        stepped = None
        if outcome == "conflict":
            conflicts.append(t.at)
        elif outcome == "missing":
            missing.add(t.pid.iteration)
        else:
            outcomes[t.at] = outcome
        if new is None:
            continue
        told_here[(t.pid.epoch, t.pid.iteration)] = t.value
        epoch = state.epoch
        state, info, accepted = new
        if info.outcome in ("initialized", "outside_support"):
            # Outside the support and replaced by a draw (a new epoch): the new
            # initial point waits for its value.
            init_value = t.value if state.epoch == epoch else None
            init_told = True
        else:
            draw = RowLayout.pack(t.value, state.logdensity, accepted, state.position)
    if missing or (state is chain.state and init_value == chain.init_value):
        return ChainPlan(outcomes, tuple(conflicts), missing=frozenset(missing))
    update, after = _write(meta, chain, state, init_value, draw, init_told, lease)
    return ChainPlan(outcomes, tuple(conflicts), update, after)


def steady(meta: SessionMeta, chain: ChainView, told: Sequence[Told]) -> bool:
    """Whether ``told`` is one result for the proposal ``chain`` waits for: the common
    case, where :func:`plan_chain` makes exactly one sampler transition, from
    ``chain.state`` with the told value."""
    if len(told) != 1:
        return False
    state, pid = chain.state, told[0].pid
    return (
        state.logdensity is not None
        and pid.iteration == state.iteration + 1
        and not meta.is_done(state)
    )


def step_steady(
    meta: SessionMeta, chains: Sequence[ChainView], told: Sequence[Told], proposals: Sequence[Any]
) -> list[tuple[Any, StepInfo]]:
    """The transitions of :func:`steady` chains, stepped together
    (:func:`core.batch.tell_many`); ``proposals`` are their outstanding ones."""
    return tell_many(
        meta.sampler,
        [ch.state for ch in chains],
        meta.params,
        proposals,
        [t.value for t in told],
    )


def _write(
    meta: SessionMeta,
    chain: ChainView,
    state: Any,
    init_value: float | None,
    draw: bytes | None,
    init_told: bool,
    lease: float,
) -> tuple[ChainUpdate, ChainView]:
    """The write that takes ``chain`` to ``state``, and the chain after it."""
    changed = cold_changed(chain.state, state)
    hot, cold = encode_state(state, chain.given, changed, meta.revision)
    after = ChainView(
        chain.chain,
        chain.version + 1,
        state,
        chain.cold_version + (cold is not None),
        init_value,
        chain.draws + (draw is not None),
        chain.inits + init_told,
        chain.given,
        meta.revision,
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


def _decide(
    meta: SessionMeta,
    chain: ChainView,
    state: Any,
    init_value: float | None,
    told: Told,
    told_here: dict[tuple[int, int], float],
    history: Mapping[int, float],
    outstanding: Proposal | None,
    stepped: tuple[Any, StepInfo] | None = None,
) -> tuple[str, _Transition | None]:
    """Classify one result against the chain as decided so far in this request
    (``state``, ``init_value``): its outcome, ``"conflict"`` or ``"missing"``, and when it
    is applied, the transition."""
    pid, value = told.pid, told.value
    key = (pid.epoch, pid.iteration)
    if key in told_here:
        return ("duplicate" if _same(told_here[key], value) else "conflict"), None
    if pid.iteration == 0:
        return _decide_initial(meta, chain, state, init_value, pid, value)
    if state.logdensity is None:
        return "conflict", None
    if pid.iteration == state.iteration + 1 and not meta.is_done(state):
        if state is not chain.state:
            return "conflict", None  # issued by no one: it follows a transition of this request
        if stepped is None:
            sampler, params = meta.sampler, meta.params
            proposal = outstanding or guarded(chain.chain, lambda: sampler.ask(state, params))
            stepped = guarded(chain.chain, lambda: sampler.tell(state, params, proposal, value))
        new, info = stepped
        return info.outcome, (new, info, info.outcome == "accepted")
    if pid.iteration <= state.iteration:
        if pid.iteration not in history:
            return "missing", None
        return ("duplicate" if _same(history[pid.iteration], value) else "conflict"), None
    return "conflict", None


def _decide_initial(
    meta: SessionMeta,
    chain: ChainView,
    state: Any,
    init_value: float | None,
    pid: ProposalId,
    value: float,
) -> tuple[str, _Transition | None]:
    """:func:`_decide` for an initial point (iteration 0)."""
    if pid.epoch < chain.state.epoch and meta.initial_radius is not None and not chain.given:
        # Replaced by a draw, which only a told -inf does.
        return ("duplicate" if value == -math.inf else "conflict"), None
    if pid.epoch != state.epoch or state.epoch != chain.state.epoch:
        # Made obsolete by a reset, never issued, or drawn in this very request.
        return "conflict", None
    if state.logdensity is None and init_value is None:
        sampler, params = meta.sampler, meta.params
        new, info = guarded(
            chain.chain, lambda: sampler.tell(state, params, sampler.ask(state, params), value)
        )
        if info.outcome == "outside_support" and not chain.given:
            new = (
                redraw(
                    new,
                    center=meta.center(chain.chain),
                    radius=meta.initial_radius,
                    max_attempts=meta.max_initial_attempts,
                )
                or new
            )
        return info.outcome, (new, info, False)
    if init_value is not None and _same(init_value, value):
        return "duplicate", None
    return "conflict", None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
