"""Run samplers in process, without the service.

:func:`run_chain` drives any sampler module of :data:`core.SAMPLERS` through its ask/tell
interface with a Python log-density function; :func:`sample` is the two-line API::

    from kameleon.core.run import sample
    draws = sample(logdensity_fn, dim=2)  # (chains, draws, dim)

``sample`` checks the draws it returns (:func:`core.checks.check`) and emits every
problem found as a :class:`~core.checks.SamplingWarning`; with ``stop`` it ends early
once the chains have converged by a :class:`~core.checks.StopRule`. The measures of
a run's output (effective sample size, R-hat, standard errors) are in
:mod:`core.diagnostics`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.core.base import FloatArray, StepInfo, frozen_array
from kameleon.core.batch import accept_block, ask_many, tell_many
from kameleon.core.checks import SamplingWarning, StopRule, check
from kameleon.core.diagnostics import summarize
from kameleon.core.initial import DEFAULT_MAX_ATTEMPTS, initial_point, redraw, start_radius
from kameleon.core.linalg import single_threaded_blas

__all__ = [
    "ChainResult",
    "SamplingWarning",
    "StopRule",
    "advance_together",
    "run_chain",
    "sample",
    "sample_chains",
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


class _Runner:
    """One chain, advanced a number of transitions at a time, its rows recorded."""

    def __init__(
        self,
        sampler: ModuleType,
        params: Any,
        logdensity_fn: LogDensityFn,
        initial: npt.ArrayLike | None,
        capacity: int,
        *,
        seed: int,
        chain: int,
        initial_radius: float | None = None,
        max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.sampler, self.params, self.logdensity_fn = sampler, params, logdensity_fn
        radius = start_radius(initial is not None, initial_radius)
        if max_initial_attempts < 1:
            raise ValueError("max_initial_attempts must be positive")
        center = None if initial is None else np.asarray(initial, dtype=np.float64)
        if radius is None:
            start = center
        else:
            dim = params.dim if center is None else center.size
            start = initial_point(
                dim, seed=seed, chain=chain, attempt=0, center=center, radius=radius
            )
        state = sampler.init(start, params, seed=seed, chain=chain)
        while True:
            proposal = sampler.ask(state, params)
            logdensity_0 = float(logdensity_fn(proposal.position))
            state, info = sampler.tell(state, params, proposal, logdensity_0)
            if info.outcome != "outside_support":
                break
            state = redraw(state, center=center, radius=radius, max_attempts=max_initial_attempts)
            if state is None:
                tried = "" if radius is None else f" (after {max_initial_attempts} drawn points)"
                raise ValueError(f"the log density of the initial point is -inf{tried}")
        self.state = state
        self.n = 0
        dim = state.position.size
        self.draws = np.empty((capacity, dim))
        self.logdensity = np.empty(capacity)
        self.told = np.empty(capacity)
        self.accepted = np.empty(capacity, dtype=bool)
        self.acceptance_probability = np.empty(capacity)

    def advance(self, transitions: int) -> None:
        advance_together([self], transitions)

    def record(self, i: int, told: float, state: Any, info: StepInfo) -> None:
        self.told[i] = told
        self.draws[i] = state.position
        self.logdensity[i] = state.logdensity
        self.accepted[i] = info.outcome == "accepted"
        self.acceptance_probability[i] = info.acceptance_probability

    def result(self) -> ChainResult:
        n = self.n
        accepted = self.accepted[:n].copy()
        accepted.flags.writeable = False
        return ChainResult(
            draws=frozen_array(self.draws[:n]),
            logdensity=frozen_array(self.logdensity[:n]),
            told=frozen_array(self.told[:n]),
            accepted=accepted,
            acceptance_probability=frozen_array(self.acceptance_probability[:n]),
            state=self.state,
        )


#: Iterations whose accept streams :func:`advance_together` draws at once.
_BLOCK = 512


def advance_together(runners: Sequence[_Runner], transitions: int) -> None:
    """Advance chains of one sampler and one log density side by side, ``transitions``
    each: per iteration, every chain's proposal (:func:`core.batch.ask_many`), the log
    densities, then every chain's step (:func:`core.batch.tell_many`), with the accept
    streams of many iterations drawn at once (:func:`core.batch.accept_block`). Each
    chain's draws are those it would make alone; only the order of the log-density
    calls differs. Every chain has its initial point and has made as many transitions
    as the others."""
    if not runners:
        return
    sampler, params, fn = runners[0].sampler, runners[0].params, runners[0].logdensity_fn
    states = [r.state for r in runners]
    first = runners[0].n + 1  # the iteration of every chain's next proposal
    batched = getattr(sampler, "METROPOLIS_ADAPT", None) is not None
    block: Any = None
    for step in range(transitions):
        if step % _BLOCK == 0 and batched:
            block = accept_block(states, first + step, min(_BLOCK, transitions - step)).tolist()
        proposals = ask_many(sampler, states, params)
        values = [float(fn(p.position)) for p in proposals]
        told = tell_many(
            sampler,
            states,
            params,
            proposals,
            values,
            accept=block[step % _BLOCK] if batched else None,
        )
        for k, (runner, value, (state, info)) in enumerate(zip(runners, values, told, strict=True)):
            runner.record(runner.n + step, value, state, info)
            states[k] = state
    for runner, state in zip(runners, states, strict=True):
        runner.state = state
        runner.n += transitions


def run_chain(
    sampler: ModuleType,
    params: Any,
    logdensity_fn: LogDensityFn,
    initial: npt.ArrayLike | None,
    n_iterations: int,
    *,
    seed: int,
    chain: int,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
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
        The initial point, shape ``(dim,)``, or ``None``: a point drawn uniformly from
        ``(-2, 2)^dim`` (see :mod:`core.initial`).
    n_iterations
        Number of transitions, warm-up included.
    seed, chain
        Identify the chain's random numbers (see :mod:`core.rng`).
    initial_radius
        Draw the starting point uniformly from ``initial ± initial_radius`` per
        coordinate (from ``± initial_radius`` without ``initial``). Default: ``initial``
        exactly when it is given, ``2.0`` when it is not.
    max_initial_attempts
        A drawn starting point whose log density is ``-inf`` is replaced by the next
        draw, up to this many points in all.

    Raises
    ------
    ValueError
        If the initial point is outside the support (and is not drawn, or every drawn
        point was), or ``logdensity_fn`` returns NaN or ``+inf``.
    """
    with single_threaded_blas():  # reproducible arithmetic (core.linalg)
        runner = _Runner(
            sampler,
            params,
            logdensity_fn,
            initial,
            n_iterations,
            seed=seed,
            chain=chain,
            initial_radius=initial_radius,
            max_initial_attempts=max_initial_attempts,
        )
        runner.advance(n_iterations)
    return runner.result()


def sample(
    logdensity_fn: LogDensityFn,
    dim: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = 4,
    iterations: int = 2000,
    warmup: int = 1000,
    initial: npt.ArrayLike | None = None,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    stop: StopRule | Mapping[str, Any] | None = None,
    warn: bool = True,
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
    )
    return np.stack([r.draws[warmup:] for r in results])


def sample_chains(
    logdensity_fn: LogDensityFn,
    dim: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = 4,
    iterations: int = 2000,
    warmup: int = 1000,
    initial: npt.ArrayLike | None = None,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    stop: StopRule | Mapping[str, Any] | None = None,
    warn: bool = True,
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
        ``(-2, 2)^dim``, as the service's chains do (see :mod:`core.initial`).
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
        A :class:`~core.checks.StopRule`, or a mapping of its fields such as
        ``{"rhat": 1.01, "ess": 400, "check_every": 1000}``: after every
        ``check_every`` post-warm-up iterations of every chain, stop if every parameter
        meets the rule on the draws so far. The draws then end there (a multiple of
        ``check_every``, fewer than ``iterations``), else at ``iterations``.
    warn
        Check the draws (see :func:`core.checks.check`) and emit each problem found as a
        :class:`~core.checks.SamplingWarning`.

    Returns
    -------
    list of ChainResult
        One per chain, warm-up included.
    """
    if algorithm not in SAMPLERS:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; known algorithms are {sorted(SAMPLERS)}"
        )
    if chains < 1 or iterations < 0 or warmup < 0:
        raise ValueError("chains must be positive, iterations and warmup non-negative")
    rule = StopRule.of(stop) if stop is not None else None
    sampler = SAMPLERS[algorithm]
    starts = (
        [None] * chains
        if initial is None
        else list(np.broadcast_to(np.asarray(initial, float), (chains, dim)))
    )
    total = warmup + iterations
    names = [f"x{i}" for i in range(dim)]
    with single_threaded_blas():  # reproducible arithmetic (core.linalg)
        params = sampler.make_params(dim, options or {}, warmup=warmup)

        def runner(c: int) -> _Runner:
            return _Runner(
                sampler,
                params,
                logdensity_fn,
                starts[c],
                total,
                seed=seed,
                chain=c,
                initial_radius=initial_radius,
                max_initial_attempts=max_initial_attempts,
            )

        runners = [runner(c) for c in range(chains)]
        if rule is None:
            advance_together(runners, total)
        else:
            advance_together(runners, warmup)
            kept = 0
            while kept < iterations:
                more = min(rule.check_every, iterations - kept)
                advance_together(runners, more)
                kept += more
                if kept < iterations and rule.met(summarize(_post(runners, warmup), names)):
                    break
        draws = _post(runners, warmup)
        if warn:
            acceptance = [
                float(r.accepted[warmup : r.n].mean()) if r.n > warmup else None for r in runners
            ]
            for finding in check(draws, names, acceptance):
                warnings.warn(SamplingWarning(finding), stacklevel=3)
    return [r.result() for r in runners]


def _post(runners: Sequence[_Runner], warmup: int) -> FloatArray:
    """The post-warm-up draws of every chain, shape ``(chains, draws, dim)``."""
    return np.stack([r.draws[warmup : r.n] for r in runners])
