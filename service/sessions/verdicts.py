"""Step 1 of the exactly-once decision (:mod:`kameleon.service.sessions.decide`):
:func:`classify` judges each told result against its chain, without the sampler, as
``apply``, ``duplicate``, ``conflict`` or ``missing``; :func:`recorded` gives what a
chain's state remembers of a result told for one of its evaluations. Pure: no I/O, no
clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from kameleon.service.core_api import (
    FloatArray,
    Parts,
    Proposal,
)
from kameleon.service.ids import ProposalId
from kameleon.service.sessions.chains import ChainView
from kameleon.service.sessions.meta import SessionMeta

__all__ = ["Classified", "Told", "classify", "recorded"]


class Told(NamedTuple):
    """One told result: its place in the request, its proposal id, its value, its
    gradient for a sampler that needs one, the target's parts for a sampler told
    them (``sgld``; :class:`core.interface.sampler.Evaluation`), and the client's draw at a
    conditional proposal (``gibbs``)."""

    at: int
    pid: ProposalId
    value: float
    gradient: FloatArray | None = None
    parts: Parts | None = None
    draw: FloatArray | None = None


class Classified(NamedTuple):
    """The told results of one chain, judged (step 1).

    ``outcomes`` maps the request index of each result decided now (``duplicate``) to
    its outcome; ``conflicts`` lists the request indices of results that cannot be
    applied; ``missing`` the iterations whose told values the judgement needs;
    ``apply`` the result for the proposal the chain waits for, if one was told.
    """

    outcomes: dict[int, str]
    conflicts: tuple[int, ...]
    missing: frozenset[int]
    apply: Told | None


def classify(
    meta: SessionMeta,
    chain: ChainView,
    told: Sequence[Told],
    history: Mapping[int, float],
    outstanding: Proposal | None = None,
) -> Classified:
    """Step 1 for ``told`` (results for ``chain``, in request order); ``history``: told
    values of transitions applied before, by iteration.

    For a sampler whose transitions take several evaluations (``outstanding``: the
    chain's outstanding proposal, whose ``step`` says how many of its transition's were
    told), a result for an evaluation applied before is a ``duplicate`` without its value
    compared: the store keeps a transition's last value only, and not which step was
    its last. A sampler that remembers what was told for some of them
    (``told_record``) has a retry of one of those compared with it, draw and value."""
    state, init_value = chain.state, chain.init_value
    steps = outstanding is not None
    outcomes: dict[int, str] = {}
    conflicts: list[int] = []
    missing: set[int] = set()
    apply: Told | None = None
    for t in told:
        pid, value = t.pid, t.value
        record = recorded(meta, chain, pid) if steps else None
        if apply is not None and pid == apply.pid:
            same = _same(apply.value, value) and _same_draw(apply.draw, t.draw)
            verdict = "duplicate" if same else "conflict"
        elif record is not None:
            same = _same(record[0], value) and _same_draw(record[1], t.draw)
            verdict = "duplicate" if same else "conflict"
        elif pid.step and not steps:
            verdict = "conflict"  # never issued: this sampler evaluates once per transition
        elif pid.iteration == 0:
            verdict = _initial(meta, chain, init_value, pid, value)
        elif state.logdensity is None:
            verdict = "conflict"
        elif pid.iteration == state.iteration + 1 and not meta.is_done(state):
            verdict = "apply" if not steps else _step_verdict(pid.step, outstanding)
        elif pid.iteration <= state.iteration and steps:
            verdict = "duplicate"
        elif pid.iteration <= state.iteration:
            if pid.iteration not in history:
                verdict = "missing"
            else:
                verdict = "duplicate" if _same(history[pid.iteration], value) else "conflict"
        else:
            verdict = "conflict"  # never issued: it would follow a transition not yet made
        if verdict == "apply":
            apply = t
        elif verdict == "conflict":
            conflicts.append(t.at)
        elif verdict == "missing":
            missing.add(pid.iteration)
        else:
            outcomes[t.at] = verdict
    return Classified(outcomes, tuple(conflicts), frozenset(missing), apply)


def _step_verdict(step: int, outstanding: Proposal | None) -> str:
    """The verdict on a result for the transition in progress, at ``step``."""
    assert outstanding is not None
    if step == outstanding.step:
        return "apply"
    return "duplicate" if step < outstanding.step else "conflict"


def _initial(
    meta: SessionMeta, chain: ChainView, init_value: float | None, pid: ProposalId, value: float
) -> str:
    """:func:`classify`'s verdict on a result for an initial point (iteration 0)."""
    state = chain.state
    if pid.epoch < state.epoch and meta.initial_radius is not None and not chain.given:
        # Replaced by a draw, which only a told -inf does.
        return "duplicate" if value == -math.inf else "conflict"
    if pid.epoch != state.epoch:
        return "conflict"  # made obsolete by a reset, or never issued
    if state.logdensity is None and init_value is None:
        return "apply"
    if init_value is not None and _same(init_value, value):
        return "duplicate"
    return "conflict"


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _same_draw(a: FloatArray | None, b: FloatArray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.tobytes() == b.tobytes()


def recorded(
    meta: SessionMeta, chain: ChainView, pid: ProposalId
) -> tuple[float, FloatArray | None] | None:
    """The value and draw told for the evaluation ``pid`` that ``chain``'s state
    remembers (``Sampler.told_record``; ``None`` when it does not)."""
    lookup = meta.sampler.told_record
    state = chain.state
    if lookup is None or pid.epoch != state.epoch or pid.iteration == 0:
        return None
    return lookup(state, meta.params, pid.iteration, pid.step)
