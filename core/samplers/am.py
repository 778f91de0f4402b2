"""Adaptive Metropolis with global scale adaptation.

The proposal is Gaussian and symmetric, ``x* = x + L z`` with ``z ~ N(0, I)`` and
``L`` the Cholesky factor of

    ``C_t = lambda_t * s_d * (Sigma_t + eps * sigma_0^2 * I)``,   ``s_d = 2.38^2 / d``,

where

* ``Sigma_t`` is the covariance of the chain's states so far (Haario, Saksman and
  Tamminen 2001, "An adaptive Metropolis algorithm", Bernoulli 7(2)), kept as a running
  mean and covariance (Welford's algorithm) so that the state is ``O(d^2)`` whatever the
  length of the chain. Every state enters the estimate, not every 20th as in the code of
  the kernel adaptive Metropolis-Hastings comparisons. Until ``adapt_start`` states have
  been seen, ``Sigma_t`` is the initial isotropic covariance ``sigma_0^2 I``.
* ``eps * sigma_0^2 * I`` is Haario's nugget: it keeps ``C_t`` positive definite even
  when the history is degenerate (a chain that has rejected everything, or moved along
  a line only). ``eps`` is relative to the initial variance ``sigma_0^2``, so it is in the
  units the user chose for the target rather than an absolute number.
* ``lambda_t`` is a global scale adapted by Robbins-Monro on ``log lambda`` toward a target
  acceptance rate of 0.234 with the clipped acceptance probability ``min(1, alpha)``
  (Andrieu and Thoms 2008, "A tutorial on adaptive MCMC", Algorithm 4). It starts at 1
  and is kept when ``Sigma_t`` switches from the initial to the estimated covariance.

Adaptation follows the ``adaptation`` option (see :mod:`core.adaptation`): in
``"warmup"`` mode the covariance estimate and the scale are updated during warm-up and
frozen afterwards, so the post-warm-up chain is a plain Metropolis chain. In
``"diminishing"`` mode the covariance estimate is updated at every iteration (its change
is ``O(1/t)`` by construction, Haario's original algorithm) and the scale, like the scale
of random-walk Metropolis, is updated with a vanishing probability.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from core.adaptation import Welford, adapt_probability, learning_rate, robbins_monro
from core.base import (
    FloatArray,
    OptionError,
    Proposal,
    StepInfo,
    frozen_array,
    metropolis_transition,
    new_chain_fields,
    parse_params,
)
from core.rng import Stream, generator
from core.serialization import register

__all__ = [
    "NAME",
    "Params",
    "State",
    "ask",
    "init",
    "make_params",
    "proposal_covariance",
    "tell",
]

NAME = "am"

# Jitter, relative to the mean variance, tried in turn when rounding makes the proposal
# covariance numerically indefinite despite the nugget.
_JITTER_EXPONENTS = range(-12, -1)


@dataclass(frozen=True, slots=True)
class Params:
    """Options of adaptive Metropolis.

    Attributes
    ----------
    initial_scale
        ``sigma_0``: standard deviation per coordinate of the initial isotropic
        covariance ``sigma_0^2 I`` (default 1, which makes the first proposals those of
        random-walk Metropolis, ``2.38 / sqrt(d)`` per coordinate). Set it to the
        target's rough scale.
    adapt_start
        Number of chain states in the covariance estimate before it replaces the initial
        covariance (default ``max(100, 2 * dim)``; at least 2). In ``"warmup"`` mode a
        warm-up shorter than this never uses the estimate.
    nugget
        ``eps``, relative to ``sigma_0^2`` (default ``1e-6``; positive).
    adapt_scale
        Adapt the global scale ``lambda`` toward ``target_acceptance`` (default true;
        false gives Haario's AM with the fixed factor ``s_d``).
    target_acceptance
        Target of the scale adaptation (default 0.234).
    adaptation
        ``"warmup"`` (default): adapt during warm-up only; ``"diminishing"``: keep
        adapting with vanishing effect.
    """

    dim: int
    warmup: int
    initial_scale: float = 1.0
    adapt_start: int | None = None
    nugget: float = 1e-6
    adapt_scale: bool = True
    target_acceptance: float = 0.234
    adaptation: Literal["warmup", "diminishing"] = "warmup"

    def __post_init__(self) -> None:
        if not self.initial_scale > 0:
            raise OptionError("initial_scale", "must be positive")
        if self.adapt_start is not None and self.adapt_start < 2:
            raise OptionError("adapt_start", "must be at least 2")
        if not self.nugget > 0:
            raise OptionError("nugget", "must be positive")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")

    @property
    def start(self) -> int:
        """The number of chain states after which the estimated covariance is used."""
        return self.adapt_start if self.adapt_start is not None else max(100, 2 * self.dim)


@register
@dataclass(frozen=True, slots=True)
class State:
    """A chain of adaptive Metropolis.

    Attributes
    ----------
    log_lambda
        Log of the global scale ``lambda`` of the proposal covariance.
    moments
        Running mean and covariance of the chain's states (cold: frozen after warm-up
        in ``"warmup"`` mode, and ``O(d^2)``).
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("moments",)

    position: FloatArray
    logdensity: float | None
    iteration: int
    accepted: int
    epoch: int
    seed: int
    chain: int
    log_lambda: float
    moments: Welford


def make_params(dim: int, options: Mapping[str, Any], *, warmup: int) -> Params:
    return parse_params(Params, options, dim=dim, warmup=warmup)  # type: ignore[no-any-return]


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        log_lambda=0.0,
        moments=Welford.empty(params.dim),
    )


def proposal_covariance(state: State, params: Params) -> FloatArray:
    """The covariance ``C_t`` of the next proposal's increment (see the module docstring)."""
    variance_0 = params.initial_scale**2
    if state.moments.count < params.start:
        sigma = variance_0 * np.eye(params.dim)
    else:
        estimate = state.moments.covariance()  # symmetric only up to rounding
        sigma = 0.5 * (estimate + estimate.T)
    sigma += params.nugget * variance_0 * np.eye(params.dim)
    return math.exp(state.log_lambda) * (2.38**2 / params.dim) * sigma


def _cholesky(covariance: FloatArray) -> FloatArray:
    """Lower Cholesky factor, with growing jitter if rounding makes the plain one fail."""
    size = float(np.mean(np.abs(np.diag(covariance))))
    identity = np.eye(len(covariance))
    for jitter in (0.0, *(size * 10.0**k for k in _JITTER_EXPONENTS)):
        try:
            return np.linalg.cholesky(covariance + jitter * identity).astype(np.float64, copy=False)
        except np.linalg.LinAlgError:
            continue
    raise ValueError("the proposal covariance is not positive definite")


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    rng = generator(state.seed, state.chain, t, Stream.PROPOSE)
    factor = _cholesky(proposal_covariance(state, params))
    x = state.position + factor @ rng.standard_normal(params.dim)
    return Proposal(t, "proposal", frozen_array(x))


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    new, info, u_adapt = metropolis_transition(state, proposal, logdensity, warmup=params.warmup)
    if proposal.kind == "init":
        return new, info
    t = proposal.iteration
    log_lambda = state.log_lambda
    p_adapt = adapt_probability(t, warmup=params.warmup, mode=params.adaptation)
    if params.adapt_scale and u_adapt < p_adapt:
        rate = learning_rate(t)
        log_lambda = robbins_monro(
            log_lambda, info.acceptance_probability, params.target_acceptance, rate
        )
    moments = state.moments
    if params.adaptation == "diminishing" or t <= params.warmup:
        moments = moments.update(new.position)
    return dataclasses.replace(new, log_lambda=log_lambda, moments=moments), info
