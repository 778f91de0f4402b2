"""The Metropolis-adjusted Langevin algorithm (MALA), with the client's gradients.

From ``x`` with gradient ``g = grad log pi(x)`` and inverse metric ``M`` (the shape of the
proposal: a vector for a diagonal one, a matrix for a dense one), the proposal is one
Euler step of the Langevin diffusion preconditioned by ``M``,

    x* = x + (eps^2 / 2) M g + eps M^(1/2) z,    z ~ N(0, I),

accepted with the Metropolis-Hastings ratio, whose proposal densities need the gradient
at ``x*`` too: so the correction is computed when ``x*``'s log density and gradient are
told, not when it is asked (Roberts and Tweedie 1996; Roberts and Rosenthal 1998, whose
optimal acceptance rate in high dimension, 0.574, is the default target).

Warm-up (:mod:`core.gradients.warmup`): the step size ``eps`` follows dual averaging
toward ``target_acceptance``, and ``M`` is the covariance of the chain's positions in
Stan's doubling windows (its diagonal by default; ``metric: "dense"`` for the whole
matrix). One evaluation per transition (with its gradient), after the gradient check of
the first chains (:mod:`core.gradients.check`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kameleon.core.gradients.chain import (
    check_gradient,
    check_gradient_options,
    new_gradient_fields,
    tell_initial_gradient,
)
from kameleon.core.gradients.check import Check, check_ask, check_tell
from kameleon.core.gradients.warmup import (
    DualAveraging,
    MetricWindow,
    warmup_changes,
)
from kameleon.core.interface.chain import ChainState, FloatArray, Proposal, StepInfo, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import accept_or_reject
from kameleon.core.interface.sampler import Evaluation, Sampler, params_parser
from kameleon.core.numerics.matrices import cholesky, dot, matvec, solve_lower
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "chain_floats",
    "init",
    "make_params",
    "tell",
    "tell_gradient",
]

NAME = "mala"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of MALA.

    Attributes
    ----------
    step_size
        The first step size ``eps``; default: from the gradient at the initial point,
        ``1 / |M^(1/2) g|`` (:func:`core.gradients.warmup.initial_step_size`).
    target_acceptance
        What dual averaging aims the acceptance rate at during warm-up (default 0.574).
    adapt_step_size
        Adapt the step size in warm-up (default true).
    adapt_metric
        Learn the inverse metric in warm-up windows (default true).
    metric
        ``"diag"`` (default): a diagonal inverse metric; ``"dense"``: a full matrix, for
        correlated targets (``O(d^2)`` memory, ``O(d^3)`` per window and ``O(d^2)`` per
        step); ``"unit"``: the identity, never learnt.
    gradient_check
        How many chains (the first ones) check the told gradient against finite
        differences at their initial point (default 1; 0: none).
    """

    dim: int
    warmup: int
    step_size: float | None = None
    target_acceptance: float = 0.574
    adapt_step_size: bool = True
    adapt_metric: bool = True
    metric: Literal["diag", "dense", "unit"] = "diag"
    gradient_check: int = 1

    def __post_init__(self) -> None:
        check_gradient_options(self)


@register("mala.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A MALA chain: the gradient at ``position``, the warm-up's state, the check."""

    gradient: FloatArray
    step: int  # evaluations told in the current transition (the gradient check's)
    evaluations: int  # evaluations told from the initial point on (the check's included)
    check: Check
    adapt: DualAveraging
    step_size: float
    metric: FloatArray  # the inverse metric: (d,) diagonal or (d, d) dense
    window: MetricWindow  # the current metric window's moments


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(**new_gradient_fields(position, params, seed=seed, chain=chain))


def _factor(metric: FloatArray) -> FloatArray:
    """``M^(1/2)``: the square roots of a diagonal, the Cholesky factor of a matrix."""
    return frozen_array(np.sqrt(metric) if metric.ndim == 1 else cholesky(metric))


def _drift(state: State, x: FloatArray, gradient: FloatArray) -> FloatArray:
    m = state.metric
    mg = m * gradient if m.ndim == 1 else matvec(m, gradient)
    return x + 0.5 * (state.step_size * state.step_size) * mg


def _log_q(state: State, to: FloatArray, frm: FloatArray, gradient: FloatArray) -> float:
    """``log q(to | frm)`` up to its constant (which cancels in the ratio)."""
    r = to - _drift(state, frm, gradient)
    m = state.metric
    if m.ndim == 1:
        quad = float(np.sum(r * r / m))
    else:
        w = solve_lower(cholesky(m), r)
        quad = dot(w, w)
    return -quad / (2.0 * state.step_size * state.step_size)


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    checking = check_ask(state)
    if checking is not None:
        return checking
    t = state.iteration + 1
    z = generator(state.seed, state.chain, t, Stream.PROPOSE).standard_normal(params.dim)
    with np.errstate(over="ignore", invalid="ignore"):
        factor = _factor(state.metric)
        noise = factor * z if state.metric.ndim == 1 else matvec(factor, z)
        point = frozen_array(
            _drift(state, state.position, state.gradient) + state.step_size * noise
        )
    if not np.isfinite(point).all():
        # Overflowed (a step size or a gradient near the float range): stay put, as
        # core.interface.metropolis.metropolis_ask does.
        point = state.position
    return Proposal(t, "proposal", point, 0.0, state.step)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    raise ValueError(f"{NAME} needs the gradient of the log density at every point")


def tell_gradient(
    state: State, params: Params, proposal: Proposal, logdensity: float, gradient: FloatArray
) -> tuple[State, StepInfo]:
    """Everything after the evaluation of ``proposal``, with its gradient."""
    g = frozen_array(check_gradient(NAME, logdensity, gradient, params.dim))
    if proposal.kind == "init":
        if (proposal.iteration, state.logdensity) != (state.iteration, None):
            raise ValueError("proposal does not belong to this state")
        return tell_initial_gradient(state, params, logdensity, g)
    if proposal.kind == "gradient_check":
        new, info = check_tell(state, proposal, logdensity, g)
        return new.evolve(evaluations=state.evaluations + 1), info
    expected = ask(state, params)
    if (proposal.kind, proposal.iteration, proposal.step) != (
        expected.kind,
        expected.iteration,
        expected.step,
    ):
        raise ValueError("proposal does not belong to this state")
    t = proposal.iteration
    if logdensity == -math.inf:
        log_correction = 0.0
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            log_correction = _log_q(state, state.position, proposal.position, g) - _log_q(
                state, proposal.position, state.position, state.gradient
            )
    u_accept = float(generator(state.seed, state.chain, t, Stream.ACCEPT).random())
    scored = Proposal(t, "proposal", proposal.position, log_correction)
    new, info = accept_or_reject(state, scored, logdensity, u_accept, warmup=params.warmup)
    new = new.evolve(
        gradient=g if info.outcome == "accepted" else state.gradient,
        step=0,
        evaluations=state.evaluations + 1,
    )
    changes = warmup_changes(new, params, info.acceptance_probability, t)
    return (new.evolve(**changes) if changes else new), info


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`)."""
    # The vectors (position, gradient, the window's four, the proposal and its
    # temporaries), the matrices of a dense metric (metric, factor, window), and about
    # 40 floats' worth of scalars and field names in the stored document.
    return 40 + 16 * dim + (3 * dim * dim if params.metric == "dense" else 0)


#: The sampler as the registry (:data:`core.SAMPLERS`) knows it.
SAMPLER: Sampler[State, Params] = Sampler(
    name=NAME,
    Params=Params,
    State=State,
    make_params=make_params,
    init=init,
    ask=ask,
    tell=tell,
    chain_floats=chain_floats,
    evaluation=Evaluation(gradient=True),
    tell_gradient=tell_gradient,
    stats=("step_size",),
)
