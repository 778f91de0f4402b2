"""What every Metropolis-Hastings sampler's ``ask`` and ``tell`` share:
:func:`metropolis_ask` hands out the initial point and draws the proposal stream, so
that a sampler gives only its proposal (:data:`Propose`); :func:`metropolis_tell` checks
the told value (:func:`check_tell`), accepts or rejects (:func:`metropolis_transition`,
:func:`metropolis_accept`), and a sampler gives only its adaptation (:data:`Adapt`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import P, Proposal, S, StepInfo, frozen_array
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "Adapt",
    "Propose",
    "accept_or_reject",
    "check_tell",
    "metropolis_accept",
    "metropolis_ask",
    "metropolis_tell",
    "metropolis_transition",
    "tell_initial",
]


def metropolis_accept(
    logdensity_new: float, logdensity_old: float, log_correction: float, uniform: float
) -> tuple[bool, float]:
    """Metropolis-Hastings decision in log space.

    Returns ``(is_accepted, acceptance_probability)`` with the probability clipped to
    ``min(1, alpha)``. ``-inf`` for the new point (outside the support) always rejects,
    and so does a ratio that is not a number: a proposal whose correction the arithmetic
    could not give (a chain near the float range, on an improper target), or log
    densities near the float range whose difference overflows against an infinite
    correction.
    """
    if logdensity_new == -math.inf:
        return False, 0.0
    log_alpha = float(logdensity_new) - float(logdensity_old) + float(log_correction)
    if math.isnan(log_alpha):
        return False, 0.0
    log_alpha = min(0.0, log_alpha)
    return bool(log1(uniform) < log_alpha), exp1(log_alpha)


Propose = Callable[[S, P, np.random.Generator], tuple[npt.ArrayLike, float]]
"""A sampler's proposal ``propose(state, params, rng) -> (position, log_correction)``
from a state whose log density is known, with ``rng`` its proposal stream."""


Adapt = Callable[[S, S, P, Proposal, StepInfo, float], S]
"""A sampler's adaptation after an accept/reject step,
``adapt(old, new, params, proposal, info, u_adapt) -> new``: ``old`` is the state told,
``new`` the state after the step (:func:`metropolis_transition`), ``u_adapt`` a uniform
of the accept stream for the adaptation coin."""


def metropolis_ask(state: S, params: P, propose: Propose[S, P]) -> Proposal:
    """The ``ask`` every sampler shares: the initial point while it is not evaluated,
    else ``propose``'s point for the next iteration, drawn from that iteration's
    proposal stream (:class:`core.numerics.rng.Stream`)."""
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    position, log_correction = propose(
        state, params, generator(state.seed, state.chain, t, Stream.PROPOSE)
    )
    point = frozen_array(position)
    if not np.isfinite(point).all():
        # The proposal's arithmetic overflowed (a chain drifting far out on an improper
        # target, an HMC trajectory blown up): propose staying put instead. Staying put
        # leaves any target invariant, so the kernel (a mixture of the two, chosen by
        # the overflow) does too; and no client is handed a point it cannot evaluate.
        return Proposal(t, "proposal", state.position, 0.0)
    return Proposal(t, "proposal", point, log_correction)


def metropolis_tell(
    state: S, params: P, proposal: Proposal, logdensity: float, adapt: Adapt[S, P]
) -> tuple[S, StepInfo]:
    """The ``tell`` every sampler shares: :func:`metropolis_transition`, then, for a
    proposal (not the initial point), ``adapt``."""
    new, info, u_adapt = metropolis_transition(state, proposal, logdensity, warmup=params.warmup)
    if proposal.kind == "init":
        return new, info
    return adapt(state, new, params, proposal, info, u_adapt), info


def metropolis_transition(
    state: Any, proposal: Proposal, logdensity: float, *, warmup: int
) -> tuple[Any, StepInfo, float]:
    """The part of ``tell`` that every Metropolis-Hastings sampler shares.

    Checks that ``proposal`` is the one ``state`` waits for; for the initial point,
    applies :func:`tell_initial`; otherwise accepts or rejects with the accept stream's
    first uniform and advances the common fields (``position``, ``logdensity``,
    ``iteration``, ``accepted``). Returns the new state, what happened, and a second
    uniform of the accept stream for the caller's adaptation coin (1.0 for the initial
    point, which never adapts).
    """
    check_tell(state, proposal, logdensity)
    if proposal.kind == "init":
        new, info = tell_initial(state, proposal, logdensity)
        return new, info, 1.0
    u_accept, u_adapt = generator(
        state.seed, state.chain, proposal.iteration, Stream.ACCEPT
    ).random(2)
    new, info = accept_or_reject(state, proposal, logdensity, float(u_accept), warmup=warmup)
    return new, info, float(u_adapt)


def accept_or_reject(
    state: Any, proposal: Proposal, logdensity: float, u_accept: float, *, warmup: int
) -> tuple[Any, StepInfo]:
    """The Metropolis-Hastings step of :func:`metropolis_transition` for a checked
    ``proposal``, given the first uniform of its accept stream."""
    t = proposal.iteration
    accepted, prob = metropolis_accept(
        logdensity, state.logdensity, proposal.log_correction, u_accept
    )
    new = state.evolve(
        position=proposal.position if accepted else state.position,
        logdensity=float(logdensity) if accepted else state.logdensity,
        iteration=t,
        accepted=state.accepted + accepted,
    )
    info = StepInfo(t, "accepted" if accepted else "rejected", prob, t <= warmup)
    return new, info


def tell_initial(state: Any, proposal: Proposal, logdensity: float) -> tuple[Any, StepInfo]:
    """The shared ``tell`` for a chain's initial point.

    A finite log density sets the chain's current state. ``-inf`` leaves the state as
    it was: the chain waits for a new initial point (:func:`core.interface.chain.reset`).
    """
    if logdensity == -math.inf:
        return state, StepInfo(state.iteration, "outside_support", 0.0, True)
    return (
        dataclasses.replace(state, logdensity=float(logdensity)),
        StepInfo(state.iteration, "initialized", 1.0, True),
    )


def check_tell(state: Any, proposal: Proposal, logdensity: float) -> None:
    """Raise ``ValueError`` unless ``proposal`` is the one ``state`` is waiting for."""
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    expected_kind = "init" if state.logdensity is None else "proposal"
    expected_iteration = state.iteration if state.logdensity is None else state.iteration + 1
    if proposal.kind != expected_kind or proposal.iteration != expected_iteration:
        raise ValueError("proposal does not belong to this state")
