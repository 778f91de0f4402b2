"""Kernel HMC lite (Strathmann et al. 2015, "Gradient-free Hamiltonian Monte Carlo with
efficient kernel exponential families", KMC lite).

The surrogate is ``f(x) = sum_i alpha_i k(z_i, x)`` on ``n`` centres ``z_i``: a uniform
reservoir sample (:mod:`core.tuning.reservoir`) of the chain's history, fitted by the
regularised lite score-matching estimator (:func:`core.kernels.score_matching.fit_lite`). The
leapfrog, the accept step and the scale adaptation are those of
:mod:`core.kernels.kernel_hmc`.

Refit schedule. Every state of the history is offered to the reservoir (``O(d)``, or
an ``O(n d)`` copy when it is kept). The first fit is made as soon as ``min_history``
states were offered. After that the surrogate is refitted on the current reservoir when
the iteration adapts and at least ``update_every`` states were offered since the last
fit, and (``"warmup"`` mode) at the last warm-up iteration, after which it freezes. A
refit costs ``O(n^3 + d n^2)`` time and ``O(n^2)`` memory: the ``n x n`` kernel matrix,
two ``n x n`` matrix products and a Cholesky factorisation, a few milliseconds for the
default ``n = 250``. So during warm-up a refit adds about ``1 / update_every`` of that
per iteration on average, and in ``"diminishing"`` mode the refits, gated by the
vanishing adaptation probability, cost ever less per iteration.

A leapfrog step costs one surrogate gradient, ``O(n d)``. The state holds the reservoir,
the centres and ``alpha``: ``O(n d)`` memory whatever the chain's length. These are its
cold fields (:mod:`core.interface.codec`); the reservoir changes with probability
``n / t`` per offer, the centres and ``alpha`` only at refits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kameleon.core.interface.chain import FloatArray, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.interface.memory import preconditioning_floats
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.kernels import kernel_hmc
from kameleon.core.kernels.kernel_hmc import KMCParams, KMCState
from kameleon.core.kernels.score_matching import LiteSurrogate, fit_lite
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

NAME = "kmc-lite"


@dataclass(frozen=True, slots=True)
class Params(KMCParams):
    """Options of KMC lite: those of :class:`core.kernels.kernel_hmc.KMCParams` and

    Attributes
    ----------
    num_centres
        ``n``, the reservoir's capacity and the number of kernel centres (default 250).
        A refit costs ``O(n^3 + d n^2)`` and a leapfrog step ``O(n d)``.
    update_every
        Refit once the iteration adapts and at least this many history states were
        offered since the last fit (default 100).
    regularization
        Relative ridge ``r`` of the fit: ``lam = r tr(C) / n`` in
        ``alpha = -(sigma/2)(C + lam (K + I))^-1 b`` (default 0.03; see
        :func:`core.kernels.score_matching.fit_lite`).
    """

    num_centres: int = 250
    update_every: int = 100
    regularization: float = 0.03

    def __post_init__(self) -> None:
        KMCParams.__post_init__(self)
        if self.num_centres < self.min_history:
            raise OptionError("num_centres", "must be at least min_history")
        if self.update_every < 1:
            raise OptionError("update_every", "must be at least 1")
        if not self.regularization > 0:
            raise OptionError("regularization", "must be positive")


@register("kmc-lite.State")
@dataclass(frozen=True, slots=True)
class State(KMCState):
    """A KMC lite chain (the shared fields are those of
    :class:`core.kernels.kernel_hmc.KMCState`).

    Attributes
    ----------
    reservoir
        Reservoir sample of the history, shape ``(min(history_size, n), d)``.
    history_size
        How many states were offered to the reservoir.
    since_fit
        How many states were offered since the last fit.
    centres
        The surrogate's centres ``z_i`` (the reservoir at the last fit); ``None`` before
        the first fit.
    alpha
        The surrogate's weights, shape ``(n,)``; ``None`` before the first fit.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = (
        "reservoir",
        "centres",
        "alpha",
        *kernel_hmc.PRECONDITIONING_COLD_FIELDS,
    )

    reservoir: FloatArray
    history_size: int
    since_fit: int
    centres: FloatArray | None
    alpha: FloatArray | None


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **kernel_hmc.initial_fields(position, params, seed=seed, chain=chain),
        reservoir=frozen_array(np.empty((0, params.dim))),
        history_size=0,
        since_fit=0,
        centres=None,
        alpha=None,
    )


def _surrogate(state: State) -> LiteSurrogate | None:
    if state.bandwidth is None:
        return None
    assert state.centres is not None and state.alpha is not None
    return LiteSurrogate(state.centres, state.alpha, state.bandwidth)


def _collect(state: State, params: KMCParams, adapt_weight: float) -> State:
    """Offer ``state.position`` to the reservoir and refit when due (module docstring)."""
    assert isinstance(params, Params)
    t = state.iteration
    rng = generator(state.seed, state.chain, t, Stream.ADAPT)
    reservoir = reservoir_update(
        state.reservoir, state.history_size, state.position, params.num_centres, rng
    )
    state = dataclasses.replace(
        state,
        reservoir=reservoir,
        history_size=state.history_size + 1,
        since_fit=state.since_fit + 1,
    )
    if state.bandwidth is None:
        due = state.history_size >= params.min_history
    else:
        due = params.is_last_warmup(t) or (
            adapt_weight > 0 and state.since_fit >= params.update_every
        )
    if not due or reservoir is state.centres:
        return state
    return _fit(state, params, rng)


def _fit(state: State, params: Params, rng: np.random.Generator) -> State:
    """Fit the surrogate on the reservoir."""
    reservoir = state.reservoir
    bandwidth = (
        params.bandwidth
        if params.bandwidth is not None
        else kernel_hmc.default_bandwidth(reservoir, rng)
    )
    if bandwidth is None:  # the history has no two distinct states yet
        return state
    try:
        alpha = fit_lite(reservoir, bandwidth, params.regularization)
    except (FloatingPointError, ValueError):  # LinAlgError is a ValueError
        # A fit that rounding ruined: keep the previous surrogate (or the random walk)
        # and try again after update_every more states.
        return dataclasses.replace(state, since_fit=0)
    return dataclasses.replace(
        state, centres=reservoir, alpha=frozen_array(alpha), bandwidth=bandwidth, since_fit=0
    )


def _remap(state: State, params: KMCParams, old: Preconditioner) -> State:
    """The map changed in warm-up (:func:`core.tuning.preconditioning.learn`): the reservoir,
    kept whitened, is whitened by the new map instead, and a fitted surrogate is
    refitted on it at once (the old fit is a function of the old coordinates)."""
    assert isinstance(params, Params) and state.preconditioner is not None
    reservoir = preconditioning.rewhiten(state.reservoir, old, state.preconditioner)
    state = dataclasses.replace(state, reservoir=reservoir)
    if state.bandwidth is None:
        return state
    rng = generator(state.seed, state.chain, state.iteration, Stream.ADAPT)
    refitted = _fit(state, params, rng)
    if refitted.centres is not reservoir:  # the fit failed: the random walk until the next
        return dataclasses.replace(refitted, centres=None, alpha=None, bandwidth=None)
    return refitted


#: ``ask(state, params)`` and ``tell(state, params, proposal, logdensity)`` (core.interface.sampler).
ask, tell = kernel_hmc.variant(_surrogate, _collect, _remap)


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    reservoir of centres, the n x n kernel matrix and its factor during a refit, and the
    preconditioning's."""
    n = int(params.num_centres)
    return preconditioning_floats(dim, params) + 3 * n * dim + 2 * n * n + 4 * n


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
