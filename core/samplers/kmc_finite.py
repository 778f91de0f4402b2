"""Kernel HMC finite (Strathmann et al. 2015, "Gradient-free Hamiltonian Monte Carlo with
efficient kernel exponential families", KMC finite).

The surrogate is ``f(x) = theta^T phi(x)`` on ``m`` random Fourier features of the
Gaussian kernel (:mod:`core.kernels.score_matching`), fitted online: the chain keeps the
Cholesky factor of the ``m x m`` score-matching matrix and the vector ``b``, never the
history. The leapfrog, the accept step and the scale adaptation are those of
:mod:`core.kernels.kernel_hmc`.

Schedule.

1. The first ``min_history`` states of the history go into a small reservoir
   (:mod:`core.tuning.reservoir`). When it is full, the bandwidth is set (unless the
   ``bandwidth`` option is given) to ``sqrt(2)`` times the median distance of its
   points: a wide kernel, since this early sample is narrower than the target and the
   features cannot be redrawn. The features are drawn once from the chain's setup
   stream and the reservoir is folded into the statistics, each point weighted by
   ``history_size / min_history``; the reservoir is then dropped.
2. After that, each adapting iteration adds its state to a pending batch with weight
   ``1 / p_t`` (``p_t`` the adaptation probability: 1 during warm-up in ``"warmup"``
   mode, vanishing in ``"diminishing"`` mode). The weights make the statistics an
   unbiased estimate of their average over the whole history, although later states
   are added ever more rarely.
3. The batch is folded in once it holds ``update_every`` states, and (``"warmup"``
   mode) at the last warm-up iteration, after which the surrogate freezes. Folding
   ``k`` states is a rank-``k d`` update of the factor, ``O(k d m^2)``
   (:func:`core.kernels.score_matching.finite_update`), then ``theta`` is re-solved in
   ``O(m^2)``: ``O(d m^2)`` per state on average. Batching makes the large ``m x m``
   factor change, and need rewriting in a store, only every ``update_every`` states.

When the preconditioner's map changes in warm-up (:func:`core.tuning.preconditioning.learn`),
the features are transformed so that the surrogate stays the same function of the
user's coordinates, and the statistics go on accumulating (see ``_remap``).

A leapfrog step costs one surrogate gradient, ``O(d m)``. The state holds the features,
the factor, ``b`` and ``theta``: ``O(m^2 + m d)`` memory whatever the chain's length.
The features are stored rather than regenerated: they are written once, and are small
next to the factor. The features' cosine tails make ``f`` oscillate far from the
history, so a chain started far in the tails may accept little until the history covers
the target's mass (the paper's remark; KMC lite does not have this weakness).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kameleon.core.interface.chain import FloatArray, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.interface.memory import preconditioning_floats
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.kernels import kernel_hmc
from kameleon.core.kernels.kernel_hmc import KMCParams, KMCState
from kameleon.core.kernels.score_matching import (
    FiniteSurrogate,
    finite_initial,
    finite_solve,
    finite_update,
    random_features,
)
from kameleon.core.numerics.matrices import matmul, solve_lower, vecmat
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.tuning import preconditioning
from kameleon.core.tuning.preconditioning import Preconditioner
from kameleon.core.tuning.reservoir import reservoir_update

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
]

NAME = "kmc-finite"

# The default bandwidth is this times kernel_hmc.default_bandwidth (the median distance) of the
# first min_history states. Those are an early, narrow sample of the target, and the
# features are drawn once: too narrow a kernel makes the cosine features oscillate within
# the target's mass, too wide a kernel only smooths. On a correlated 5-dimensional
# Gaussian, sqrt(2) gave several times the effective sample size of 1.
_BANDWIDTH_FACTOR = math.sqrt(2.0)


@dataclass(frozen=True, slots=True)
class Params(KMCParams):
    """Options of KMC finite: those of :class:`core.kernels.kernel_hmc.KMCParams` and

    Attributes
    ----------
    num_features
        ``m``, the number of random Fourier features (default 200). Folding a state in
        costs ``O(d m^2)``, a leapfrog step ``O(d m)``, the state ``O(m^2)`` memory.
    update_every
        Size of the pending batch of states folded in at once (default 20).
    regularization
        The ridge in units of one history point: ``lam_0 = r sum_j ||omega_j||^2 / m^2``
        is added to the summed score-matching matrix (default 100; see
        :func:`core.kernels.score_matching.finite_regularizer`). Relative to the average over
        ``N`` points it fades as ``r / N``, with ``lam_0`` as its floor in the sum.
    """

    num_features: int = 200
    update_every: int = 20
    regularization: float = 100.0

    def __post_init__(self) -> None:
        KMCParams.__post_init__(self)
        if self.num_features < 1:
            raise OptionError("num_features", "must be at least 1")
        if self.update_every < 1:
            raise OptionError("update_every", "must be at least 1")
        if not self.regularization > 0:
            raise OptionError("regularization", "must be positive")


@register("kmc-finite.State")
@dataclass(frozen=True, slots=True)
class State(KMCState):
    """A KMC finite chain (the shared fields are those of
    :class:`core.kernels.kernel_hmc.KMCState`).

    Attributes
    ----------
    reservoir
        Before the features are drawn: reservoir sample of the history, shape
        ``(min(history_size, min_history), d)``; afterwards empty.
    history_size
        How many states were offered to the reservoir.
    pending, pending_weights
        States waiting to be folded in, shape ``(k, d)``, and their weights ``(k,)``.
    omega, phase
        The features (:func:`core.kernels.score_matching.random_features`); ``None`` until
        drawn.
    factor, b
        Upper Cholesky factor of the summed score-matching matrix and the summed ``b``
        (:func:`core.kernels.score_matching.finite_update`); ``None`` until the features exist.
    theta
        The surrogate's weights ``factor^-1 factor^-T b``; ``None`` likewise.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = (
        "reservoir",
        "omega",
        "phase",
        "factor",
        "b",
        "theta",
        *kernel_hmc.PRECONDITIONING_COLD_FIELDS,
    )

    reservoir: FloatArray
    history_size: int
    pending: FloatArray
    pending_weights: FloatArray
    omega: FloatArray | None
    phase: FloatArray | None
    factor: FloatArray | None
    b: FloatArray | None
    theta: FloatArray | None


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **kernel_hmc.initial_fields(position, params, seed=seed, chain=chain),
        reservoir=frozen_array(np.empty((0, params.dim))),
        history_size=0,
        pending=frozen_array(np.empty((0, params.dim))),
        pending_weights=frozen_array(np.empty(0)),
        omega=None,
        phase=None,
        factor=None,
        b=None,
        theta=None,
    )


def _surrogate(state: State) -> FiniteSurrogate | None:
    if state.bandwidth is None:
        return None
    assert state.omega is not None and state.phase is not None and state.theta is not None
    return FiniteSurrogate(state.omega, state.phase, state.theta)


def _collect(state: State, params: KMCParams, adapt_weight: float) -> State:
    """Enter ``state.position`` into the history (module docstring)."""
    assert isinstance(params, Params)
    if state.bandwidth is None:
        return _collect_first(state, params)
    pending, weights = state.pending, state.pending_weights
    if adapt_weight > 0:
        pending = frozen_array(np.vstack([pending, state.position]))
        weights = frozen_array(np.append(weights, adapt_weight))
    due = len(weights) >= params.update_every or params.is_last_warmup(state.iteration)
    if not due or len(weights) == 0:
        return dataclasses.replace(state, pending=pending, pending_weights=weights)
    return _fold(state, pending, weights)


def _collect_first(state: State, params: Params) -> State:
    """Before the features: offer the state to the reservoir; draw the features and fold
    the reservoir in once it is full and spread."""
    rng = generator(state.seed, state.chain, state.iteration, Stream.ADAPT)
    reservoir = reservoir_update(
        state.reservoir, state.history_size, state.position, params.min_history, rng
    )
    state = dataclasses.replace(state, reservoir=reservoir, history_size=state.history_size + 1)
    if state.history_size < params.min_history:
        return state
    if params.bandwidth is not None:
        bandwidth = params.bandwidth
    else:
        median_distance = kernel_hmc.default_bandwidth(reservoir, rng)
        if median_distance is None:  # the history has no two distinct states yet
            return state
        bandwidth = _BANDWIDTH_FACTOR * median_distance
    setup = generator(state.seed, state.chain, 0, Stream.SETUP)
    omega, phase = random_features(setup, params.dim, params.num_features, bandwidth)
    factor, b = finite_initial(omega, params.regularization)
    state = dataclasses.replace(
        state,
        reservoir=frozen_array(np.empty((0, params.dim))),
        omega=frozen_array(omega),
        phase=frozen_array(phase),
        factor=factor,
        b=b,
        bandwidth=bandwidth,
    )
    weights = np.full(len(reservoir), state.history_size / len(reservoir))
    return _fold(state, reservoir, weights)


def _fold(state: State, points: FloatArray, weights: FloatArray) -> State:
    """Fold weighted ``points`` into the statistics and re-solve ``theta``."""
    assert state.factor is not None and state.b is not None
    assert state.omega is not None and state.phase is not None
    pending = frozen_array(np.empty((0, points.shape[1])))
    pending_weights = frozen_array(np.empty(0))
    try:
        factor, b = finite_update(state.factor, state.b, points, state.omega, state.phase, weights)
    except FloatingPointError:
        # The batch would make the factor non-finite (absurd points or weights): drop it
        # and keep the statistics, and so the surrogate, as they were.
        return dataclasses.replace(state, pending=pending, pending_weights=pending_weights)
    return dataclasses.replace(
        state,
        pending=pending,
        pending_weights=pending_weights,
        factor=frozen_array(factor),
        b=frozen_array(b),
        theta=frozen_array(finite_solve(factor, b)),
    )


def _remap(state: State, params: KMCParams, old: Preconditioner) -> State:
    """The map changed in warm-up (:func:`core.tuning.preconditioning.learn`): the surrogate is
    carried over unchanged as a function of the user's coordinates, and points still
    waiting (the reservoir before the features, the pending batch) are whitened anew.

    With ``u_old = B u + c`` (``B = L_old^-1 L_new``, ``c = L_old^-1 (m_new - m_old)``) the
    features ``cos(omega^T u_old + phase)`` are ``cos((B^T omega)^T u + phase + omega^T c)``:
    the same functions, so ``theta`` and the statistics stay as they are. The statistics
    then sum score-matching terms taken in two coordinate systems; each is a Fisher
    divergence with its own positive definite metric, minimised by the target's own
    gradient, and so is their sum: new states refine the same fit.
    """
    new = state.preconditioner
    assert new is not None
    reservoir = preconditioning.rewhiten(state.reservoir, old, new)
    pending = preconditioning.rewhiten(state.pending, old, new)
    if state.omega is None or state.phase is None:
        return dataclasses.replace(state, reservoir=reservoir, pending=pending)
    dim = params.dim
    columns = [solve_lower(old.factor, np.ascontiguousarray(new.factor[:, j])) for j in range(dim)]
    b_transposed = np.array(columns)  # row j is column j of B
    shift = solve_lower(old.factor, new.shift - old.shift)
    omega = matmul(b_transposed, state.omega)
    phase = state.phase + vecmat(shift, state.omega)
    return dataclasses.replace(
        state,
        reservoir=reservoir,
        pending=pending,
        omega=frozen_array(omega),
        phase=frozen_array(phase),
    )


#: ``ask(state, params)`` and ``tell(state, params, proposal, logdensity)`` (core.interface.sampler).
ask, tell = kernel_hmc.variant(_surrogate, _collect, _remap)


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    frequencies, the m x m covariance and its factor, the batch of pending states, and
    the preconditioning's."""
    m, u = int(params.num_features), int(params.update_every)
    return preconditioning_floats(dim, params) + 2 * m * dim + 3 * m * m + (u + 4) * dim


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
)
