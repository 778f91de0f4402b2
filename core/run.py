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

import math
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
    "effective_sample_size",
    "monte_carlo_standard_error",
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


def effective_sample_size(draws: npt.ArrayLike) -> FloatArray:
    """Effective sample size of the mean of each quantity in ``draws``.

    Parameters
    ----------
    draws
        Shape ``(chains, n, ...)``: ``n`` successive draws of each chain; every trailing
        index is a separate quantity.

    Returns
    -------
    numpy.ndarray
        Shape ``draws.shape[2:]``: ``chains * n / tau`` with ``tau`` the integrated
        autocorrelation time, estimated from the chains together (between-chain
        differences count as slow mixing). Not rank-normalised: meant for quantities
        with a finite variance.
    """
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim < 2 or x.shape[1] < 4:
        raise ValueError("draws must have shape (chains, n, ...) with n >= 4")
    chains, n = x.shape[:2]
    x = x.reshape(chains, n, -1)
    centred = x - x.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(centred, n=2 * n, axis=1)
    autocovariance = np.fft.irfft(spectrum * np.conj(spectrum), axis=1)[:, :n] / n
    within = np.mean(autocovariance[:, 0] * n / (n - 1), axis=0)
    between = np.var(x.mean(axis=1), axis=0, ddof=1) if chains > 1 else 0.0
    pooled = within * (n - 1) / n + between
    ess = np.empty(x.shape[2])
    for k in range(x.shape[2]):
        if not pooled[k] > 0:  # constant draws: nothing to estimate
            ess[k] = np.nan
            continue
        rho = 1 - (within[k] - autocovariance[:, :, k].mean(axis=0)) / pooled[k]
        pairs = rho[: n - n % 2 : 2] + rho[1 : n - n % 2 : 2]
        negative = np.flatnonzero(pairs <= 0)
        pairs = pairs[: negative[0] if negative.size else pairs.size]
        tau = -1 + 2 * np.sum(np.minimum.accumulate(pairs))
        # Stan's cap: antithetic chains may have tau < 1, but not ESS > N log10 N.
        ess[k] = chains * n / max(tau, 1 / math.log10(chains * n))
    return ess.reshape(np.shape(draws)[2:])


def monte_carlo_standard_error(draws: npt.ArrayLike) -> FloatArray:
    """Standard error of the mean of each quantity in ``draws`` (shape ``(chains, n, ...)``)."""
    x = np.asarray(draws, dtype=np.float64)
    flat = x.reshape(-1, *x.shape[2:])
    standard_error: FloatArray = np.sqrt(np.var(flat, axis=0, ddof=1) / effective_sample_size(x))
    return standard_error
