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

Adaptation follows the ``adaptation`` option (see :mod:`core.tuning.adaptation`): in
``"warmup"`` mode the covariance estimate and the scale are updated during warm-up and
frozen afterwards, so the post-warm-up chain is a plain Metropolis chain. In
``"diminishing"`` mode the covariance estimate is updated at every iteration (its change
is ``O(1/t)`` by construction, Haario's original algorithm) and the scale, like the scale
of random-walk Metropolis, is updated with a vanishing probability.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import metropolis_ask, metropolis_tell
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import exp1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import matvec
from kameleon.core.tuning.adaptation import (
    Welford,
    adapt_probability,
    learning_rate,
    robbins_monro,
    usable_covariance,
)
from kameleon.core.tuning.windows import window_ends

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "chain_floats",
    "init",
    "make_params",
    "proposal_covariance",
    "proposal_factor",
    "tell",
]

NAME = "am"


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
    windows
        In ``"warmup"`` mode, estimate the covariance in windows of doubling length that
        end at ``warmup / 32, ..., warmup / 2, warmup``
        (:func:`core.tuning.windows.window_ends`; those that would hold fewer than
        ``adapt_start`` states are merged into the next), each starting from the previous
        window's estimate with ``lambda`` back at 1, as Stan's warm-up does (default
        true). A scale that the first proposals got wrong by orders of magnitude is then
        corrected geometrically rather than by diffusion, and the post-warm-up proposal
        uses the last window's estimate, free of the transient from the starting point.
        False: one estimate over the whole warm-up (Haario et al.).
    """

    dim: int
    warmup: int
    initial_scale: float = 1.0
    adapt_start: int | None = None
    nugget: float = 1e-6
    adapt_scale: bool = True
    target_acceptance: float = 0.234
    adaptation: Literal["warmup", "diminishing"] = "warmup"
    windows: bool = True

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


@register("am.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A chain of adaptive Metropolis.

    Attributes
    ----------
    log_lambda
        Log of the global scale ``lambda`` of the proposal covariance.
    moments
        Running mean and covariance of the chain's states in the current window (cold:
        frozen after warm-up in ``"warmup"`` mode, and ``O(d^2)``).
    window_covariance
        The previous window's covariance estimate, used until the current window has
        ``adapt_start`` states; ``None`` before the first window ends.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("moments", "window_covariance")

    log_lambda: float
    moments: Welford
    window_covariance: FloatArray | None = None  # absent from states stored before windows


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        log_lambda=0.0,
        moments=Welford.empty(params.dim),
        window_covariance=None,
    )


def proposal_covariance(state: State, params: Params, *, estimate: bool = True) -> FloatArray:
    """The covariance ``C_t`` of the next proposal's increment (see the module docstring).

    An estimate that is not finite or has a variance above
    :data:`core.tuning.adaptation.MAX_VARIANCE` (the chain drifts on a flat or unbounded
    target) is not used, nor any estimate if not ``estimate``: the previous window's
    covariance is, or the initial one."""
    variance_0 = params.initial_scale * params.initial_scale
    sigma: FloatArray | None = None
    if estimate and state.moments.count >= params.start:
        running = state.moments.covariance()  # symmetric only up to rounding
        if usable_covariance(running):
            sigma = 0.5 * (running + running.T)
    if sigma is None:
        if state.window_covariance is not None:
            sigma = np.array(state.window_covariance)
        else:
            sigma = variance_0 * np.eye(params.dim)
    sigma += params.nugget * variance_0 * np.eye(params.dim)
    return exp1(state.log_lambda) * (2.38 * 2.38 / params.dim) * sigma


def ask(state: State, params: Params) -> Proposal:
    return metropolis_ask(state, params, _propose)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    return metropolis_tell(state, params, proposal, logdensity, _adapt)


def _propose(state: State, params: Params, rng: np.random.Generator) -> tuple[FloatArray, float]:
    step = matvec(proposal_factor(state, params), rng.standard_normal(params.dim))
    return state.position + step, 0.0


def proposal_factor(state: State, params: Params) -> FloatArray:
    """The lower Cholesky factor of :func:`proposal_covariance`; remembered once the
    chain's adaptation has stopped (past warm-up in ``"warmup"`` mode), when it is the
    same at every iteration."""
    if params.adaptation != "warmup" or state.iteration < params.warmup:
        return _factor(state, params)
    key = (id(state.moments), id(state.window_covariance), state.log_lambda, params)
    with _FROZEN.lock:
        hit = _FROZEN.entries.get(key)
        if hit is not None and hit[0] is state.moments:
            _FROZEN.entries.move_to_end(key)
            return hit[2]
    factor = _factor(state, params)
    factor.flags.writeable = False
    _FROZEN.put(key, (state.moments, state.window_covariance, factor))
    return factor


def _factor(state: State, params: Params) -> FloatArray:
    try:
        return jittered_cholesky(proposal_covariance(state, params))
    except np.linalg.LinAlgError:  # an estimate that rounding left far from definite
        return jittered_cholesky(proposal_covariance(state, params, estimate=False))


class _Frozen:
    """Factors of frozen proposal covariances, least recently used first (one per chain
    past warm-up), bounded in bytes. An entry holds the objects whose identities are in
    its key, so that no other object can take their ids while it is kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.bytes = max_bytes, 0
        self.entries: OrderedDict[tuple[Any, ...], tuple[Any, Any, FloatArray]] = OrderedDict()
        self.lock = threading.Lock()

    def put(self, key: tuple[Any, ...], entry: tuple[Welford, Any, FloatArray]) -> None:
        moments, window, factor = entry
        size = moments.m2.nbytes + factor.nbytes + (0 if window is None else window.nbytes)
        with self.lock:
            if key in self.entries:
                return
            self.entries[key] = entry
            self.bytes += size
            while self.bytes > self.max_bytes and self.entries:
                _, (m, w, f) = self.entries.popitem(last=False)
                self.bytes -= m.m2.nbytes + f.nbytes + (0 if w is None else w.nbytes)


_FROZEN = _Frozen(max_bytes=64 * 2**20)


def _adapt(
    state: State, new: State, params: Params, proposal: Proposal, info: StepInfo, u_adapt: float
) -> State:
    t = info.iteration
    if params.adaptation == "warmup" and t > params.warmup:
        return new  # adaptation is over: nothing below would change (adapt_probability 0)
    log_lambda = state.log_lambda
    ends = _window_ends(params)
    p_adapt = adapt_probability(t, warmup=params.warmup, mode=params.adaptation)
    if params.adapt_scale and u_adapt < p_adapt:
        rate = learning_rate(t, start=max((e for e in ends if e < t), default=0))
        log_lambda = robbins_monro(
            log_lambda, info.acceptance_probability, params.target_acceptance, rate
        )
    moments = state.moments
    window_covariance = state.window_covariance
    if params.adaptation == "diminishing" or t <= params.warmup:
        moments = moments.update(new.position)
    if t in ends and moments.count >= 2:  # a window ends: the next starts from it
        estimate = moments.covariance()
        if usable_covariance(estimate) and np.all(np.diagonal(estimate) > 0):
            window_covariance = frozen_array(0.5 * (estimate + estimate.T))
            log_lambda = 0.0
        moments = Welford.empty(params.dim)
    evolved: State = new.evolve(
        log_lambda=log_lambda, moments=moments, window_covariance=window_covariance
    )
    return evolved


def _window_ends(params: Params) -> tuple[int, ...]:
    """The warm-up iterations after which a new window starts (all but the last end).

    A window holds at least ``adapt_start`` states, the number the covariance estimate
    needs before it is used: a shorter window would hand the next one an estimate from
    a handful of correlated states (in d = 8 with a 1000-iteration warm-up, windows of 31
    states took the smallest bulk ESS of 16 000 draws of a standard normal from about
    600 to 25)."""
    if not params.windows or params.adaptation != "warmup":
        return ()
    return window_ends(params.warmup, params.dim, minimum=params.start)[:-1]


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    Welford mean and covariance, the window's covariance, the proposal covariance and
    its Cholesky factor."""
    return 4 * dim * dim + 4 * dim


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
    # What tell hands to metropolis_tell: core.running.batch.tell_many steps many chains at once.
    metropolis_adapt=_adapt,
)
