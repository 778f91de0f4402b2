"""``kameleon.sample``: one call that samples a Python log density, in process or through
a Kameleon service, and returns a :class:`~kameleon.result.Result`.

In process (``url=None``) it runs :func:`kameleon.core.run.sample_chains`. With a URL it
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
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core import DEFAULT_ALGORITHM
from kameleon.core.checks import SamplingWarning, StopRule, check
from kameleon.core.diagnostics import ParameterSummary, summarize
from kameleon.core.initial import DEFAULT_MAX_ATTEMPTS
from kameleon.core.run import sample_chains
from kameleon.models import ChainDiagnostics, Diagnostics, ParameterDiagnostics
from kameleon.result import Result

__all__ = ["sample"]

from kameleon._run import LogDensity, _Progress, _Run
from kameleon.remote import served


def sample(
    logdensity: LogDensity,
    dim: int | None = None,
    initial: npt.ArrayLike | None = None,
    algorithm: str = DEFAULT_ALGORITHM,
    chains: int = 4,
    iterations: int = 2000,
    warmup: int = 1000,
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
    **options: Any,
) -> Result:
    """Draws from the density ``exp(logdensity)``, in process or through a service.

    Parameters
    ----------
    logdensity
        Maps a point, a read-only float64 array of shape ``(dim,)``, to its log density
        (unnormalised), ``-inf`` outside the support; or to the log of an unbiased
        estimate of the density (then say ``pseudo_marginal=True`` to a service).
    dim
        Dimension; may be omitted when ``initial`` is given.
    initial
        Starting point, ``(dim,)`` for every chain or ``(chains, dim)``; default: each
        chain starts at its own point drawn uniformly from ``(-2, 2)^dim``.
    algorithm
        ``"am"`` (default), ``"kameleon"``, ``"kmc-lite"``, ``"kmc-finite"``, ``"rwm"``.
    chains, iterations, warmup
        Chains; draws kept per chain after warm-up; warm-up iterations per chain.
    url
        ``None``: run in this process. Else a service's URL: run there.
    workers
        Through a service: how many points are evaluated at once, each by its own
        worker that asks with a lease, evaluates, and steps. Threads by default (a log
        density in numpy or C releases the GIL); ``parallel="processes"`` evaluates in
        a process pool (``logdensity`` must then be picklable). In process: ignored.
    seed
        Seed of every random number; the same seed gives the same draws, in process or
        not, whatever ``workers``. ``None``: a random seed, recorded in the result.
    progress
        Show a progress bar (iterations, acceptance, evaluations per second, and the
        largest R-hat when known).
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
    **options
        The algorithm's options, e.g. ``preconditioning="dense"``.

    Returns
    -------
    Result
        Draws ``(chains, draws, dim)``, log densities, acceptance, diagnostics and
        warnings; each warning is also emitted as a
        :class:`~kameleon.core.checks.SamplingWarning`.

    Raises
    ------
    ValueError
        Bad arguments; a chain has no initial point inside the support; the log density
        is NaN or ``+inf``.
    """
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
    )
    if url is None:
        result = _in_process(run)
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
    for finding in result.warnings:
        warnings.warn(SamplingWarning(finding), stacklevel=2)
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


def _in_process(run: _Run) -> Result:
    """Run :func:`kameleon.core.run.sample_chains` and read the result off its chains."""
    total = run.chains * (run.warmup + run.iterations + 1)  # + each initial point
    bar = _Progress(total, run.progress, acceptance_known=False)
    fn = run.logdensity

    def counted(x: npt.NDArray[np.float64]) -> float:
        value = float(fn(x))
        bar.count(1, 1, 0)
        bar.draw()
        return value

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
        )
    except BaseException:
        bar.close()
        raise
    kept = slice(run.warmup, None)
    draws = np.stack([c.draws[kept] for c in chains])
    log_density = np.stack([c.logdensity[kept] for c in chains])
    acceptance = np.array(
        [float(c.accepted[kept].mean()) if c.accepted[kept].size else math.nan for c in chains]
    )
    summaries = summarize(draws, run.names) if draws.shape[1] else []
    findings = check(
        draws,
        run.names,
        [None if math.isnan(a) else float(a) for a in acceptance],
        summaries=summaries,
        log_density=log_density,
    )
    diagnostics = _local_diagnostics(draws, run, acceptance, summaries)
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
    )


def _local_diagnostics(
    draws: npt.NDArray[np.float64],
    run: _Run,
    acceptance: npt.NDArray[np.float64],
    summaries: Sequence[ParameterSummary],
) -> Diagnostics:
    n = draws.shape[1]
    parameters = [
        ParameterDiagnostics(
            name=p["name"],
            mean=p["mean"],
            sd=p["sd"],
            mcse_mean=p["mcse_mean"],
            ess_bulk=p["ess_bulk"],
            ess_tail=p["ess_tail"],
            r_hat=p["r_hat"],
        )
        for p in summaries
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
    return Diagnostics(draws=n, parameters=parameters, chains=chains, warnings=[])
