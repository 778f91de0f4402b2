"""Run samplers in process, without the service, and measure their output.

``run_chain`` drives any sampler module of :data:`core.SAMPLERS` through its ask/tell
interface with a Python log-density function; ``sample`` is the two-line API::

    from core.run import sample
    draws = sample(logdensity_fn, dim=2)  # (chains, draws, dim)

``effective_sample_size`` and ``monte_carlo_standard_error`` summarise such draws with
the multi-chain autocorrelation estimator of Stan (Gelman et al. 2013, "Bayesian Data
Analysis", 3rd ed., section 11.5) truncated by Geyer's (1992) initial monotone sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from core import SAMPLERS
from core.base import FloatArray, frozen_array

__all__ = [
    "ChainResult",
    "run_chain",
    "sample",
]

LogDensityFn = Callable[[FloatArray], float]


@dataclass(frozen=True, eq=False)
class ChainResult:
    """What :func:`run_chain` recorded, one row per transition.

    Attributes
    ----------
    draws
        The chain's position after each transition, shape ``(n, dim)``.
    logdensity
        The chain's (cached) log density after each transition, shape ``(n,)``.
    told
        The log density told for each transition's proposal, shape ``(n,)``.
    accepted
        Whether each proposal was accepted, shape ``(n,)``.
    acceptance_probability
        ``min(1, alpha)`` of each proposal, shape ``(n,)``.
    state
        The final state.
    """

    draws: FloatArray
    logdensity: FloatArray
    told: FloatArray
    accepted: npt.NDArray[np.bool_]
    acceptance_probability: FloatArray
    state: Any


def run_chain(
    sampler: ModuleType,
    params: Any,
    logdensity_fn: LogDensityFn,
    initial: npt.ArrayLike,
    n_iterations: int,
    *,
    seed: int,
    chain: int,
) -> ChainResult:
    """Run one chain of ``sampler`` for ``n_iterations`` transitions after its initial point.

    Parameters
    ----------
    sampler
        A sampler module (see :mod:`core.base`), e.g. ``core.SAMPLERS["am"]``.
    params
        Its ``Params``, from ``sampler.make_params``.
    logdensity_fn
        Maps a read-only position of shape ``(dim,)`` to its log density (or the log of an
        unbiased estimate of it), ``-inf`` outside the support. It is called once per
        proposal and never for a point already in the chain.
    initial
        The initial point, shape ``(dim,)``; its log density must be finite.
    n_iterations
        Number of transitions, warm-up included.
    seed, chain
        Identify the chain's random numbers (see :mod:`core.rng`).

    Raises
    ------
    ValueError
        If the initial point is outside the support, or ``logdensity_fn`` returns NaN or
        ``+inf``.
    """
    state = sampler.init(initial, params, seed=seed, chain=chain)
    proposal = sampler.ask(state, params)
    state, info = sampler.tell(state, params, proposal, float(logdensity_fn(proposal.position)))
    if info.outcome == "outside_support":
        raise ValueError("the log density of the initial point is -inf")
    dim = state.position.size
    draws = np.empty((n_iterations, dim))
    logdensity = np.empty(n_iterations)
    told = np.empty(n_iterations)
    accepted = np.empty(n_iterations, dtype=bool)
    acceptance_probability = np.empty(n_iterations)
    for i in range(n_iterations):
        proposal = sampler.ask(state, params)
        told[i] = logdensity_fn(proposal.position)
        state, info = sampler.tell(state, params, proposal, float(told[i]))
        draws[i] = state.position
        logdensity[i] = state.logdensity
        accepted[i] = info.outcome == "accepted"
        acceptance_probability[i] = info.acceptance_probability
    accepted.flags.writeable = False
    return ChainResult(
        draws=frozen_array(draws),
        logdensity=frozen_array(logdensity),
        told=frozen_array(told),
        accepted=accepted,
        acceptance_probability=frozen_array(acceptance_probability),
        state=state,
    )


def sample(
    logdensity_fn: LogDensityFn,
    dim: int,
    *,
    algorithm: str = "kameleon",
    chains: int = 4,
    iterations: int = 1000,
    warmup: int = 1000,
    initial: npt.ArrayLike | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> FloatArray:
    """Draws from the density ``exp(logdensity_fn)`` on ``R^dim``.

    Parameters
    ----------
    logdensity_fn
        Maps a position of shape ``(dim,)`` to its (unnormalised) log density, ``-inf``
        outside the support; or to the log of an unbiased estimate of the density.
    dim
        Dimension of the space.
    algorithm
        A name in :data:`core.SAMPLERS` (default ``"kameleon"``).
    chains
        Number of chains, run one after the other with chain ids ``0..chains-1``.
    iterations
        Draws kept per chain, after warm-up.
    warmup
        Warm-up iterations per chain, discarded.
    initial
        Initial point: shape ``(dim,)`` for every chain, ``(chains, dim)`` for one per
        chain, or ``None`` for the origin.
    seed
        Seed of all the chains' random numbers; the same seed gives the same draws.
    options
        The algorithm's options (see its ``Params``).

    Returns
    -------
    numpy.ndarray
        The post-warm-up draws, shape ``(chains, iterations, dim)``.
    """
    if algorithm not in SAMPLERS:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; known algorithms are {sorted(SAMPLERS)}"
        )
    if chains < 1 or iterations < 0 or warmup < 0:
        raise ValueError("chains must be positive, iterations and warmup non-negative")
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(dim, options or {}, warmup=warmup)
    starts = np.broadcast_to(
        np.zeros(dim) if initial is None else np.asarray(initial, float), (chains, dim)
    )
    runs = [
        run_chain(
            sampler, params, logdensity_fn, starts[c], warmup + iterations, seed=seed, chain=c
        )
        for c in range(chains)
    ]
    return np.stack([run.draws[warmup:] for run in runs])
