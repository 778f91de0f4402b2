"""``kameleon.sample``: one call that samples a Python log density, in process or through
a Kameleon service, and returns a :class:`~kameleon.result.Result`.

In process (``url=None``) it runs :func:`kameleon.core.running.inprocess.sample_chains`. With a URL it
creates a session and runs ``workers`` workers, each asking for proposals with a lease,
evaluating them and stepping (tell, then ask), so that an expensive log density is
evaluated at several points at once. Either way the same seed gives the same draws, bit
for bit: a chain's random numbers depend only on the seed, the chain and the values told.
"""

from __future__ import annotations

import math
import secrets
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.core.diagnostics.findings import SamplingWarning, StopRule, group
from kameleon.core.diagnostics.summary import ParameterSummary
from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.core.populations.evidence import Evidence
from kameleon.core.running.chains import ConditionalFn, EvaluateMany
from kameleon.core.running.initial import DEFAULT_MAX_ATTEMPTS
from kameleon.core.running.inprocess import assess_results, sample_chains
from kameleon.models import ChainDiagnostics, Diagnostics, EvidenceSummary, ParameterDiagnostics
from kameleon.result import Result

__all__ = ["sample"]

from kameleon._run import LogDensity, _Progress, _Run, single_threaded_worker
from kameleon.remote import served, served_session


class _MinusInfinity:
    """The user's log density, with ``None`` read as ``-inf`` (outside the support, as
    ``null`` over HTTP). A class, not a closure, so that a process pool can pickle it."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, x: Any) -> Any:
        value = self.fn(x)
        if value is None:
            return -math.inf
        if isinstance(value, tuple) and len(value) == 2:  # (log density, gradient)
            density, gradient = value
            return (-math.inf if density is None else density), gradient
        if isinstance(value, list | tuple) or (
            isinstance(value, np.ndarray) and value.dtype == object
        ):
            return np.array([-math.inf if v is None else v for v in value], dtype=np.float64)
        return value


def sample(
    logdensity: LogDensity,
    dim: int | None = None,
    initial: npt.ArrayLike | None = None,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = CHAINS,
    iterations: int = ITERATIONS,
    warmup: int = WARMUP,
    url: str | None = None,
    workers: int = 1,
    seed: int | None = None,
    progress: bool = True,
    stop: StopRule | Mapping[str, Any] | None = None,
    *,
    initial_radius: float | None = None,
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
    param_names: list[str] | None = None,
    pseudo_marginal: bool = False,
    api_key: str | None = None,
    lease_seconds: float = 60.0,
    parallel: Literal["threads", "processes"] = "threads",
    retry_seconds: float = 60.0,
    session: str | None = None,
    extend: bool = False,
    vectorize: bool = False,
    max_bytes: int | None = None,
    conditionals: Mapping[int, ConditionalFn] | None = None,
    **options: Any,
) -> Result:
    """Draws from the density ``exp(logdensity)``, in process or through a service.

    Parameters
    ----------
    logdensity
        Maps a point, a read-only float64 array of shape ``(dim,)``, to its log density
        (unnormalised), ``-inf`` (or ``None``, as ``null`` over HTTP) outside the
        support; or to the log of an unbiased estimate of the density (then say
        ``pseudo_marginal=True`` to a service). With ``vectorize=True`` it maps an
        array ``(n, dim)`` of points to ``n`` values.
    dim
        Dimension; may be omitted when ``initial`` is given.
    initial
        Starting point, ``(dim,)`` for every chain or ``(chains, dim)``; default: each
        chain starts at its own point drawn uniformly from ``(-2, 2)^dim``.
    algorithm
        A name of :data:`kameleon.core.SAMPLERS` (the README's sampler table): ``"am"``
        (default), ``"kameleon"``, ``"kmc-lite"``, ``"kmc-finite"``, ``"rwm"``,
        ``"nuts"``, ``"hmc"``, ``"mala"``, ``"sgld"``, ``"gibbs"``, ``"ensemble"``,
        ``"importance"``, ``"tempering"``, ``"smc"``.
    chains, iterations, warmup
        Chains; draws kept per chain after warm-up; warm-up iterations per chain.
    url
        ``None``: run in this process. Else a service's URL: run there.
    workers
        How many points are evaluated at once. Through a service, each by its own
        worker that asks with a lease, evaluates, and steps (for a sampler whose
        chains hand out rounds, ``ensemble``, ``smc``, ``tempering``, ``importance``:
        one thread asks for a point per worker and evaluates them side by side in a
        pool of ``workers``, so that they share even one chain's population); in
        process, the chains'
        proposals of an iteration are evaluated in a pool of ``workers`` (as emcee's
        ``pool=``), which helps when there are at least as many chains. Threads by
        default (a log density in numpy or C releases the GIL); ``parallel="processes"``
        evaluates in a process pool (``logdensity`` must then be picklable). With more
        than one worker, BLAS (OpenBLAS, MKL) runs one thread per worker, so that the
        workers do not fight over the cores.
    seed
        Seed of every random number; the same seed gives the same draws, in process or
        not, whatever ``workers``. ``None``: a random seed, recorded in the result.
    progress
        Show a progress bar (iterations, acceptance, evaluations per second, and the
        largest R-hat when known); through a service, first the address of the
        session's page in the service's dashboard (``<url>/ui/sessions/<id>``).
    stop
        A stopping rule such as ``{"rhat": 1.01, "ess": 400, "check_every": 1000}``:
        stop before ``iterations`` once it is met.
    initial_radius, max_initial_attempts
        Draw starting points from ``initial ± initial_radius``; how many drawn points
        outside the support a chain may replace (see the README, "Starting points").
    param_names
        One name per dimension; default ``x0, x1, ...``.
    pseudo_marginal
        Through a service: the told values are logs of unbiased estimates (in process
        the current point is never evaluated again anyway).
    api_key
        Through a service: its API key (default ``KAMELEON_API_KEY``).
    lease_seconds
        Through a service: how long a worker holds a proposal; a proposal whose worker
        died is handed out again when its lease runs out. Make it longer than one
        evaluation.
    parallel
        ``"threads"`` or ``"processes"`` (see ``workers``).
    retry_seconds
        Through a service: how long each request is retried while the service is
        unreachable or answers 503.
    session
        Through a service: join this existing session (more workers on a run, or one
        that was interrupted) instead of creating one; its settings are the session's,
        and the arguments that make a session (``dim``, ``chains``, ...) are ignored.
    extend
        With ``session=``: first make the session end at ``iterations`` draws per chain
        after its warm-up (more than it had: it may only grow) and, if ``stop`` is
        given, stop by that rule instead; a session that was done goes on from where
        each chain stopped.
    vectorize
        ``logdensity`` takes every chain's point of an iteration at once, an array
        ``(chains, dim)``, and returns ``chains`` values (as emcee's ``vectorize``); in
        process only.
    max_bytes
        In process: refuse, before allocating, a run that would need more memory than
        this (estimated as the service estimates a session); default half the
        machine's memory.
    conditionals
        For ``gibbs`` with conditional blocks (``blocks=[{"indices": [0, 1],
        "conditional": True}, ...]``): ``{block: draw}``, one function per conditional
        block, keyed by its place in ``blocks``. ``draw(x, rng)`` gets the chain's
        current point ``x`` (read-only, every coordinate) and a numpy generator seeded
        from the seed, the chain, the iteration and the step (so that a run replays, in
        process or through a service alike), and returns the block's values drawn from
        their full conditional, in the block's order; ``logdensity`` is then evaluated
        at the point they make.
    **options
        The algorithm's options, e.g. ``preconditioning="dense"``.

    Returns
    -------
    Result
        Draws ``(chains, draws, dim)``, log densities, acceptance, diagnostics and
        warnings; each warning is also emitted as a
        :class:`~kameleon.core.diagnostics.findings.SamplingWarning`.

    Interrupted (Ctrl-C), it returns the draws made so far with a
    :class:`~kameleon.core.running.inprocess.Interrupted` warning; through a service the warning names
    the session and how to go on (``session=``).

    Raises
    ------
    ValueError
        Bad arguments; a chain has no initial point inside the support; the log density
        is NaN or ``+inf``; in process, a run that needs more memory than ``max_bytes``.
    """
    sampler = SAMPLERS.get(algorithm)
    if sampler is not None and sampler.evaluation.parts:
        raise ValueError(
            f"{algorithm} is told a log prior and a minibatch's log likelihood apart: run it "
            "with kameleon.core.running.inprocess.sample_chains (f(x, minibatch)) or over the HTTP API; "
            "kameleon.sample does not drive it yet"
        )
    logdensity = _MinusInfinity(logdensity)
    if extend and session is None:
        raise ValueError("extend=True extends a session: give session= (and url=) too")
    if session is not None:
        if url is None:
            raise ValueError("session= joins a session on a service: give url= too")
        return _warned(
            served_session(
                session,
                logdensity,
                url,
                workers=workers,
                api_key=api_key,
                lease_seconds=lease_seconds,
                parallel=parallel,
                retry_seconds=retry_seconds,
                progress=progress,
                extend=(iterations, StopRule.of(stop) if stop is not None else None)
                if extend
                else None,
                conditionals=conditionals,
            )
        )
    if vectorize and url is not None:
        raise ValueError("vectorize=True runs in process only (url=None)")
    dim, initial = _dim(dim, initial, chains)
    if workers < 1:
        raise ValueError("workers must be positive")
    if parallel not in ("threads", "processes"):
        raise ValueError("parallel must be 'threads' or 'processes'")
    names = list(param_names) if param_names is not None else [f"x{i}" for i in range(dim)]
    if len(names) != dim:
        raise ValueError(f"{len(names)} param_names for dim {dim}")
    if seed is None:
        seed = secrets.randbits(32)
    rule = StopRule.of(stop) if stop is not None else None
    run = _Run(
        logdensity=logdensity,
        dim=dim,
        initial=initial,
        algorithm=algorithm,
        chains=chains,
        iterations=iterations,
        warmup=warmup,
        seed=seed,
        rule=rule,
        initial_radius=initial_radius,
        max_initial_attempts=max_initial_attempts,
        names=names,
        options=options,
        progress=progress,
        conditionals=dict(conditionals or {}),
    )
    if url is None:
        result = _in_process(run, workers, parallel, vectorize, max_bytes)
    else:
        result = served(
            run,
            url,
            workers=workers,
            api_key=api_key,
            lease_seconds=lease_seconds,
            parallel=parallel,
            pseudo_marginal=pseudo_marginal,
            retry_seconds=retry_seconds,
        )
    return _warned(result)


def _warned(result: Result) -> Result:
    for finding in group(result.warnings):  # one per kind, naming what it concerns
        warnings.warn(SamplingWarning(finding), stacklevel=3)
    return result


def _dim(
    dim: int | None, initial: npt.ArrayLike | None, chains: int
) -> tuple[int, npt.NDArray[np.float64] | None]:
    if initial is None:
        if dim is None:
            raise ValueError("give dim, or initial (its length is the dimension)")
        return int(dim), None
    rows = np.asarray(initial, dtype=np.float64)
    if rows.ndim not in (1, 2) or rows.shape[-1] == 0:
        raise ValueError("initial must have shape (dim,) or (chains, dim)")
    if rows.ndim == 2 and rows.shape[0] not in (1, chains):
        raise ValueError(f"initial has {rows.shape[0]} rows for {chains} chains")
    if dim is not None and int(dim) != rows.shape[-1]:
        raise ValueError(f"initial has {rows.shape[-1]} coordinates, dim is {dim}")
    return int(rows.shape[-1]), rows


# -------------------------------------------------------------------- in process


def _in_process(
    run: _Run, workers: int, parallel: str, vectorize: bool, max_bytes: int | None
) -> Result:
    """Run :func:`kameleon.core.running.inprocess.sample_chains` and read the result off its chains."""
    total = run.chains * (run.warmup + run.iterations + 1)  # + each initial point
    bar = _Progress(total, run.progress, acceptance_known=False)
    vectorized = run.logdensity
    fn = _one_point(vectorized) if vectorize else vectorized

    gradients = SAMPLERS[run.algorithm].evaluation.gradient if run.algorithm in SAMPLERS else False
    if gradients and vectorize:
        raise ValueError(f"{run.algorithm} evaluates one point at a time: vectorize=False")

    def counted(x: npt.NDArray[np.float64]) -> Any:
        value = fn(x) if gradients else float(fn(x))
        bar.count(1, 1, 0)
        bar.draw()
        return value

    pool: Executor | None = None
    if workers > 1 and not vectorize:
        pool = (
            ProcessPoolExecutor(workers, initializer=single_threaded_worker)
            if parallel == "processes"
            else ThreadPoolExecutor(workers, thread_name_prefix="kameleon-eval")
        )
    many = None if gradients else _evaluate_many(vectorized, pool, vectorize, bar)
    try:
        chains = sample_chains(
            counted if bar.enabled else fn,
            run.dim,
            algorithm=run.algorithm,
            chains=run.chains,
            iterations=run.iterations,
            warmup=run.warmup,
            initial=run.initial,
            initial_radius=run.initial_radius,
            max_initial_attempts=run.max_initial_attempts,
            seed=run.seed,
            options=run.options,
            stop=run.rule,
            warn=False,  # checked below, with the run's names and one summary
            evaluate_many=many,
            max_bytes=max_bytes,
            conditionals=run.conditionals,
        )
    except BaseException:
        bar.close()
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    kept = slice(run.warmup, None)
    draws = np.stack([c.draws[kept] for c in chains])
    log_density = np.stack([c.logdensity[kept] for c in chains])
    acceptance = np.array(
        [float(c.accepted[kept].mean()) if c.accepted[kept].size else math.nan for c in chains]
    )
    sampler = SAMPLERS[run.algorithm]
    params = sampler.make_params(len(run.names), run.options, warmup=run.warmup)
    assessment = assess_results(sampler, params, chains, run.names, run.warmup)
    summaries, findings = assessment.summaries, assessment.findings
    diagnostics = _local_diagnostics(
        draws, run, acceptance, summaries, assessment.evidence, assessment.autocorrelation_time
    )
    bar.r_hat = diagnostics.max_r_hat
    bar.close()
    return Result(
        draws=draws,
        log_density=log_density,
        acceptance=acceptance,
        param_names=run.names,
        diagnostics=diagnostics,
        warnings=findings,
        seed=run.seed,
        algorithm=run.algorithm,
        warmup=run.warmup,
        accepted=np.stack([c.accepted[kept] for c in chains]),
        acceptance_probability=np.stack([c.acceptance_probability[kept] for c in chains]),
        sample_stats={
            name: np.stack([c.stats[kept, k] for c in chains])
            for k, name in enumerate(chains[0].stat_names if chains else ())
        },
        log_weights=assessment.log_weights,
    )


def _one_point(fn: LogDensity) -> LogDensity:
    """A vectorised log density at one point (an initial point): a block of one row."""

    def one(x: npt.NDArray[np.float64]) -> float:
        block = x[None, :]
        return float(np.asarray(fn(block), dtype=np.float64).reshape(-1)[0])

    return one


def _evaluate_many(
    fn: LogDensity, pool: Executor | None, vectorize: bool, bar: _Progress
) -> EvaluateMany | None:
    """An iteration's log densities at once: in one vectorised call, or in the pool."""
    if not vectorize and pool is None:
        return None

    def many(points: list[npt.NDArray[np.float64]]) -> list[float]:
        if vectorize:
            block = np.stack(points)
            block.flags.writeable = False
            values = np.asarray(fn(block), dtype=np.float64).reshape(-1)
            if values.size != len(points):
                raise ValueError(
                    f"a vectorised log density returned {values.size} values for "
                    f"{len(points)} points"
                )
            out = values.tolist()
        else:
            assert pool is not None
            out = [float(v) for v in pool.map(fn, points)]
        bar.count(len(points), len(points), 0)
        bar.draw()
        return out

    return many


def _local_diagnostics(
    draws: npt.NDArray[np.float64],
    run: _Run,
    acceptance: npt.NDArray[np.float64],
    summaries: Sequence[ParameterSummary],
    evidence: Evidence | None,
    autocorrelation_time: Sequence[float] | None = None,
) -> Diagnostics:
    n = draws.shape[1]
    times = autocorrelation_time or [math.nan] * len(summaries)
    parameters = [
        ParameterDiagnostics(
            name=p["name"],
            mean=p["mean"],
            sd=p["sd"],
            mcse_mean=p["mcse_mean"],
            ess_bulk=p["ess_bulk"],
            ess_tail=p["ess_tail"],
            r_hat=p["r_hat"],
            autocorrelation_time=t,
        )
        for p, t in zip(summaries, times, strict=True)
    ]
    chains = [
        ChainDiagnostics(
            chain=c,
            iterations=run.warmup + n,
            draws=n,
            acceptance_rate=None if math.isnan(a) else float(a),
        )
        for c, a in enumerate(acceptance)
    ]
    return Diagnostics(
        draws=n,
        parameters=parameters,
        chains=chains,
        warnings=[],
        evidence=None if evidence is None else EvidenceSummary.from_json(evidence.as_dict()),
    )
