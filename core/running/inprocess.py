"""Run samplers in process, without the service.

:func:`run_chain` drives any sampler module of :data:`core.SAMPLERS` through its ask/tell
interface with a Python log-density function (the chains' recorder is in
:mod:`core.running.chains`); :func:`sample` is the two-line API::

    from kameleon.core.running.inprocess import sample
    draws = sample(logdensity_fn, dim=2)  # (chains, draws, dim)

``sample`` checks the draws it returns (:func:`core.diagnostics.convergence.check`) and emits every
problem found as a :class:`~core.diagnostics.findings.SamplingWarning`; with ``stop`` it ends early
once the chains have converged by a :class:`~core.diagnostics.findings.StopRule`. The measures of
a run's output (effective sample size, R-hat, standard errors) are in
:mod:`core.diagnostics.summary`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.core.diagnostics.assess import Assessment, assess, summaries_of
from kameleon.core.diagnostics.findings import SamplingWarning, StopRule
from kameleon.core.interface.chain import FloatArray
from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.core.interface.memory import describe, inprocess_bytes
from kameleon.core.interface.sampler import Sampler
from kameleon.core.numerics.linalg import single_threaded_blas
from kameleon.core.running.chains import (
    ChainResult,
    ConditionalFn,
    EvaluateMany,
    LogDensityFn,
    Runner,
    advance_together,
)
from kameleon.core.running.initial import DEFAULT_MAX_ATTEMPTS

__all__ = [
    "ChainResult",
    "Interrupted",
    "SamplingWarning",
    "StopRule",
    "advance_together",
    "memory_limit",
    "run_chain",
    "sample",
    "sample_chains",
]


class Interrupted(UserWarning):
    """A run interrupted (Ctrl-C) returned the draws it had made."""


def memory_limit() -> int:
    """What an in-process run may need by default: half of this machine's physical
    memory (1 GiB if it cannot be read)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 2
    except (ValueError, OSError, AttributeError):
        return 2**30


def run_chain(
    sampler: Sampler[Any, Any],
    params: Any,
    logdensity_fn: LogDensityFn,
    initial: npt.ArrayLike | None,
    n_iterations: int,
    *,
    seed: int,
    chain: int,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    conditionals: Mapping[int, ConditionalFn] | None = None,
) -> ChainResult:
    """Run one chain of ``sampler`` for ``n_iterations`` transitions after its initial point.

    Parameters
    ----------
    sampler
        A sampler module (see :mod:`core.interface.sampler`), e.g. ``core.SAMPLERS["am"]``.
    params
        Its ``Params``, from ``sampler.make_params``.
    logdensity_fn
        Maps a read-only position of shape ``(dim,)`` to its log density (or the log of an
        unbiased estimate of it), ``-inf`` outside the support. It is called once per
        proposal and never for a point already in the chain.
    initial
        The initial point, shape ``(dim,)``, or ``None``: a point drawn uniformly from
        ``(-2, 2)^dim`` (see :mod:`core.running.initial`).
    n_iterations
        Number of transitions, warm-up included.
    seed, chain
        Identify the chain's random numbers (see :mod:`core.numerics.rng`).
    initial_radius
        Draw the starting point uniformly from ``initial ± initial_radius`` per
        coordinate (from ``± initial_radius`` without ``initial``). Default: ``initial``
        exactly when it is given, ``2.0`` when it is not.
    max_initial_attempts
        A drawn starting point whose log density is ``-inf`` is replaced by the next
        draw, up to this many points in all.
    conditionals
        For ``gibbs``, a draw function for each conditional block, keyed by the block's
        place in ``blocks`` (:data:`core.running.chains.ConditionalFn`).

    Raises
    ------
    ValueError
        If the initial point is outside the support (and is not drawn, or every drawn
        point was), or ``logdensity_fn`` returns NaN or ``+inf``.
    """
    with single_threaded_blas():  # see core.numerics.linalg
        runner = Runner(
            sampler,
            params,
            logdensity_fn,
            initial,
            n_iterations,
            seed=seed,
            chain=chain,
            initial_radius=initial_radius,
            max_initial_attempts=max_initial_attempts,
            conditionals=conditionals,
        )
        runner.advance(n_iterations)
    return runner.result()


def sample(
    logdensity_fn: LogDensityFn,
    dim: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = CHAINS,
    iterations: int = ITERATIONS,
    warmup: int = WARMUP,
    initial: npt.ArrayLike | None = None,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    stop: StopRule | Mapping[str, Any] | None = None,
    warn: bool = True,
    conditionals: Mapping[int, ConditionalFn] | None = None,
) -> FloatArray:
    """Draws from the density ``exp(logdensity_fn)`` on ``R^dim``: the post-warm-up
    draws of :func:`sample_chains`, shape ``(chains, draws, dim)``; see there for the
    parameters."""
    results = sample_chains(
        logdensity_fn,
        dim,
        algorithm=algorithm,
        chains=chains,
        iterations=iterations,
        warmup=warmup,
        initial=initial,
        initial_radius=initial_radius,
        max_initial_attempts=max_initial_attempts,
        seed=seed,
        options=options,
        stop=stop,
        warn=warn,
        conditionals=conditionals,
    )
    return np.stack([r.draws[warmup:] for r in results])


def sample_chains(
    logdensity_fn: LogDensityFn,
    dim: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = CHAINS,
    iterations: int = ITERATIONS,
    warmup: int = WARMUP,
    initial: npt.ArrayLike | None = None,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    stop: StopRule | Mapping[str, Any] | None = None,
    warn: bool = True,
    evaluate_many: EvaluateMany | None = None,
    max_bytes: int | None = None,
    conditionals: Mapping[int, ConditionalFn] | None = None,
) -> list[ChainResult]:
    """Every chain of :func:`sample`'s run, warm-up included: one :class:`ChainResult`
    per chain, with what each transition told, accepted and cached (the parameters are
    :func:`sample`'s). :func:`sample` returns ``[r.draws[warmup:] for r in
    sample_chains(...)]`` stacked.

    Parameters
    ----------
    logdensity_fn
        Maps a position of shape ``(dim,)`` to its (unnormalised) log density, ``-inf``
        outside the support; or to the log of an unbiased estimate of the density.
    dim
        Dimension of the space.
    algorithm
        A name in :data:`core.SAMPLERS` (default :data:`core.DEFAULT_ALGORITHM`,
        ``"am"``).
    chains
        Number of chains, with chain ids ``0..chains-1``. They run side by side
        (:func:`advance_together`), with ``stop`` ``check_every`` iterations at a time.
    iterations
        Draws kept per chain, after warm-up; with ``stop``, the most kept.
    warmup
        Warm-up iterations per chain, discarded.
    initial
        Initial point: shape ``(dim,)`` for every chain, ``(chains, dim)`` for one per
        chain, or ``None``: each chain starts at its own point drawn uniformly from
        ``(-2, 2)^dim``, as the service's chains do (see :mod:`core.running.initial`).
    initial_radius
        Draw each chain's starting point uniformly from ``initial ± initial_radius`` per
        coordinate. Default: ``initial`` exactly when it is given, ``2.0`` when not.
    max_initial_attempts
        A drawn starting point whose log density is ``-inf`` is replaced by the chain's
        next draw, up to this many points per chain; then :class:`ValueError`.
    seed
        Seed of all the chains' random numbers; the same seed gives the same draws.
    options
        The algorithm's options (see its ``Params``).
    stop
        A :class:`~core.diagnostics.findings.StopRule`, or a mapping of its fields such as
        ``{"rhat": 1.01, "ess": 400, "check_every": 1000}``: after every
        ``check_every`` post-warm-up iterations of every chain, stop if every parameter
        meets the rule on the draws so far. The draws then end there (a multiple of
        ``check_every``, fewer than ``iterations``), else at ``iterations``.
    warn
        Check the draws (see :func:`core.diagnostics.convergence.check`) and emit each problem found as a
        :class:`~core.diagnostics.findings.SamplingWarning`.
    evaluate_many
        Evaluates the log densities of every chain's proposal of an iteration in one call
        (a thread or process pool, or one vectorised call); default: ``logdensity_fn``
        once per chain. The initial points are evaluated by ``logdensity_fn``.
    max_bytes
        Refuse, before allocating, a run whose memory (:func:`core.interface.memory.inprocess_bytes`,
        the service's model of a chain plus the recorded rows) would pass this; default
        :func:`memory_limit`.
    conditionals
        For ``gibbs`` with conditional blocks: ``{block: draw}``, one function per
        conditional block, keyed by its place in the ``blocks`` option, called as
        ``draw(x, rng)`` with the chain's current point ``x`` (read-only) and a numpy
        generator seeded from the chain's seed, iteration and step; it returns the
        block's values drawn from their full conditional, in the block's order. The
        log density is then evaluated at the point they make.

    Returns
    -------
    list of ChainResult
        One per chain, warm-up included. Interrupted (Ctrl-C) after every chain's
        initial point, the transitions made so far, with an :class:`Interrupted` warning.
    """
    if algorithm not in SAMPLERS:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; known algorithms are {sorted(SAMPLERS)}"
        )
    if chains < 1 or iterations < 0 or warmup < 0:
        raise ValueError("chains must be positive, iterations and warmup non-negative")
    rule = StopRule.of(stop) if stop is not None else None
    sampler = SAMPLERS[algorithm]
    if rule is not None and sampler.weighted:
        raise ValueError(
            f"{algorithm} draws are weighted, not chains: they have no R-hat for a "
            "stopping rule; give iterations instead"
        )
    starts = (
        [None] * chains
        if initial is None
        else list(np.broadcast_to(np.asarray(initial, float), (chains, dim)))
    )
    total = warmup + iterations
    names = [f"x{i}" for i in range(dim)]
    with single_threaded_blas():  # see core.numerics.linalg
        params = sampler.make_params(dim, options or {}, warmup=warmup)
        need = inprocess_bytes(algorithm, dim, chains, params, total)
        limit = memory_limit() if max_bytes is None else max_bytes
        if need > limit:
            raise ValueError(
                f"this run would need about {describe(need)} of memory for its {chains} "
                f"chain(s) of {algorithm} in {dim} dimensions and their {total} iterations; "
                f"the limit is {describe(limit)} (max_bytes)"
            )

        def runner(c: int) -> Runner:
            return Runner(
                sampler,
                params,
                logdensity_fn,
                starts[c],
                total,
                seed=seed,
                chain=c,
                initial_radius=initial_radius,
                max_initial_attempts=max_initial_attempts,
                evaluate_many=evaluate_many,
                conditionals=conditionals,
            )

        runners = [runner(c) for c in range(chains)]
        try:
            if rule is None:
                advance_together(runners, total)
            else:
                advance_together(runners, warmup)
                kept = 0
                while kept < iterations:
                    more = min(rule.check_every, iterations - kept)
                    advance_together(runners, more)
                    kept += more
                    if kept < iterations and rule.met(
                        summaries_of(sampler, params, _post(runners, warmup), names)
                    ):
                        break
        except KeyboardInterrupt:
            n = runners[0].n
            warnings.warn(
                Interrupted(
                    f"interrupted after {n} of {total} iterations per chain "
                    f"({max(0, n - warmup)} after warm-up): returning the draws so far"
                ),
                stacklevel=3,
            )
        if warn:
            results = [r.result() for r in runners]
            for finding in assess_results(sampler, params, results, names, warmup).findings:
                warnings.warn(SamplingWarning(finding), stacklevel=3)
    return [r.result() for r in runners]


def assess_results(
    sampler: Sampler[Any, Any],
    params: Any,
    results: Sequence[ChainResult],
    names: Sequence[str],
    warmup: int,
) -> Assessment:
    """:func:`core.diagnostics.assess.assess` of the chains' post-warm-up draws, cut to the
    shortest chain."""
    n = min((len(r.draws) for r in results), default=0)
    kept = slice(warmup, max(n, warmup))
    draws = np.stack([r.draws[kept] for r in results])
    acceptance = [
        float(r.accepted[kept].mean()) if r.accepted[kept].size else None for r in results
    ]
    stats = {
        name: np.stack([r.stats[kept, k] for r in results])
        for k, name in enumerate(results[0].stat_names if results else ())
    }
    return assess(
        sampler,
        params,
        draws,
        names,
        acceptance=acceptance,
        log_density=np.stack([r.logdensity[kept] for r in results]),
        stats=stats,
        states=[r.state for r in results],
    )


def trajectory_stats(
    results: Sequence[ChainResult], warmup: int
) -> tuple[FloatArray | None, FloatArray | None]:
    """The post-warm-up ``divergent`` and ``energy`` arguments of
    :func:`core.diagnostics.convergence.check` from the chains' recorded statistics (``None`` where the
    sampler records none)."""

    def stacked(name: str) -> FloatArray | None:
        columns = [r.stat(name) for r in results]
        kept = [c[warmup:] for c in columns if c is not None]
        return np.stack(kept) if kept and len(kept) == len(columns) else None

    return stacked("diverging"), stacked("energy")


def _post(runners: Sequence[Runner], warmup: int) -> FloatArray:
    """The post-warm-up draws of every chain, shape ``(chains, draws, dim)``."""
    return np.stack([r.draws[warmup : r.n] for r in runners])
