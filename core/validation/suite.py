"""The validation suite: targets with known answers, and known hard cases on which a
sampler need not be right but must say so.

:func:`core.validation.cases.cases` lists them; :func:`run_case` runs one sampler on one case in process and
measures it against the truth. ``tests/core/test_validation.py`` runs a reduced suite in
CI; ``bench/validation.py`` runs the full one and writes the table in BENCHMARKS.md.
Every case carries the exact gradient of its log density, so that gradient samplers
(``SAMPLERS[name].evaluation.gradient``, e.g. ``mala``) run on it too: they are given
``x -> (logdensity(x), gradient(x))``.

A sampler is **right** on a case with a known answer when every parameter's pooled
post-warm-up mean is within 4 Monte Carlo standard errors of the truth, every sd within
10 % of it, and, where marginal quantiles are known (heavy tails, whose sample sd is no
guide), the fraction of draws below each true quantile within 4 standard errors of its
level (the standard error ``sqrt(q (1 - q) / ESS)`` with the bulk ESS). Whatever the
case, a sampler that is not right must say so: a warning (:mod:`core.diagnostics.findings`). On a **hard** case (Neal's funnel, the centred eight-schools
hierarchy, a well-separated two-component mixture) it must raise at least one
convergence warning (:mod:`core.diagnostics.findings`): a confident clean exit there is the failure.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.assess import summaries_of
from kameleon.core.diagnostics.autocorr import by_walker
from kameleon.core.diagnostics.findings import SamplingWarning
from kameleon.core.diagnostics.summary import MIN_DRAWS, ess_bulk, mcse_mean, per_parameter, rhat
from kameleon.core.interface.chain import FloatArray
from kameleon.core.interface.sampler import Sampler
from kameleon.core.running.inprocess import assess_results, sample_chains
from kameleon.core.validation.cases import LEVELS, Case
from kameleon.core.validation.targets import quantile_error

__all__ = ["CaseResult", "run_case"]


@dataclass(frozen=True)
class CaseResult:
    """What :func:`run_case` measured (JSON-able through :meth:`as_dict`)."""

    target: str
    algorithm: str
    hard: bool
    evaluations: int
    seconds: float
    warnings: list[str]
    max_rhat: float
    min_ess_per_1000: float
    max_mean_error_mcse: float | None
    sd_ratio: tuple[float, float] | None
    max_quantile_error_se: float | None
    coverage_error: float | None

    @property
    def right(self) -> bool | None:
        """Right on a case with a known answer (``None`` for hard cases)."""
        if self.hard:
            return None
        return self.matches

    @property
    def matches(self) -> bool:
        """The known answers, where given, met (hard cases included)."""
        ok = True
        if self.max_mean_error_mcse is not None:
            ok &= self.max_mean_error_mcse < 4
        if self.sd_ratio is not None:
            ok &= self.sd_ratio[0] > 0.9 and self.sd_ratio[1] < 1.1
        if self.max_quantile_error_se is not None:
            ok &= self.max_quantile_error_se < 4
        return ok

    @property
    def says_so(self) -> bool:
        """Whether it warned."""
        return bool(self.warnings)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "right": self.right, "says_so": self.says_so}


def _as_chains(
    sampler: Sampler[Any, Any],
    dim: int,
    options: dict[str, Any] | None,
    warmup: int,
    draws: FloatArray,
) -> FloatArray:
    """Post-warm-up ``draws`` as the chains their MCSE, R-hat and ESS are computed on: as
    they are, but for an ensemble each walker's whole sweeps as a chain, as
    :func:`core.diagnostics.assess.summaries_of` reads them (its interleaved walkers would hide the
    autocorrelation at lags of a sweep)."""
    if sampler.ensemble_size is None:
        return draws
    params = sampler.make_params(dim, options or {}, warmup=warmup)
    walkers = by_walker(draws, sampler.ensemble_size(params), warmup + 1)
    chains, sweeps, w, d = walkers.shape
    if sweeps < MIN_DRAWS:
        return draws
    return walkers.transpose(0, 2, 1, 3).reshape(chains * w, sweeps, d)


def run_case(
    case: Case,
    algorithm: str,
    *,
    chains: int,
    warmup: int,
    iterations: int,
    seed: int,
    options: dict[str, Any] | None = None,
) -> CaseResult:
    """Run ``algorithm`` on ``case`` in process and measure it.

    A gradient sampler (``SAMPLERS[algorithm].evaluation.gradient``) is given
    ``x -> (case.logdensity(x), case.gradient(x))``; the others the log density alone.
    ``evaluations`` counts transitions, ``chains * (warmup + iterations)``, for every
    sampler: a gradient sampler's evaluation includes the gradient, and its first chain's
    gradient check (``2 dim`` evaluations or more at the initial point, see
    :mod:`core.gradients.check`) is not counted, as no sampler's initial point is.
    """
    fn: Callable[[FloatArray], Any] = case.logdensity
    if SAMPLERS[algorithm].evaluation.gradient:
        gradient = case.gradient
        if gradient is None:
            raise ValueError(f"{algorithm} needs a gradient, and case {case.name} has none")
        logdensity = case.logdensity

        def fn(x: FloatArray) -> tuple[float, FloatArray]:
            return logdensity(x), gradient(x)

    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            results = sample_chains(
                fn,
                case.dim,
                algorithm=algorithm,
                chains=chains,
                warmup=warmup,
                iterations=iterations,
                seed=seed,
                options=options,
            )
    seconds = time.perf_counter() - started
    codes = sorted(
        {w.message.finding.code for w in caught if isinstance(w.message, SamplingWarning)}
    )
    draws = np.stack([r.draws[warmup:] for r in results])
    flat = draws.reshape(-1, case.dim)
    sampler = SAMPLERS[algorithm]
    if sampler.weighted:  # importance samples: every estimate is weighted
        params = sampler.make_params(case.dim, options or {}, warmup=warmup)
        names = [f"x{i}" for i in range(case.dim)]
        # The assessment's weighted summaries (core.populations.evidence), and its weights for the
        # quantiles.
        assessment = assess_results(sampler, params, results, names, warmup)
        log_w, evidence = assessment.log_weights, assessment.evidence
        assert log_w is not None and evidence is not None
        w = np.exp(log_w.ravel() - log_w.max())
        w /= w.sum()
        mean = np.array([p["mean"] for p in assessment.summaries])
        sd = np.array([p["sd"] for p in assessment.summaries])
        mcse = np.array([p["mcse_mean"] for p in assessment.summaries])
        ess_all = np.full(case.dim, evidence.ess)

        def below_fraction(q: FloatArray) -> FloatArray:
            return np.asarray(
                np.einsum("n,nlk->lk", w, (flat[:, None, :] <= q[None, :, :]).astype(float))
            )

        max_rhat, ess = math.nan, ess_all
    elif sampler.population is not None:  # smc: each chain's population as a whole
        params = sampler.make_params(case.dim, options or {}, warmup=warmup)
        found = summaries_of(sampler, params, draws, [f"x{i}" for i in range(case.dim)])
        mean, sd = flat.mean(axis=0), flat.std(axis=0)
        mcse = np.array([p["mcse_mean"] for p in found])

        def below_fraction(q: FloatArray) -> FloatArray:
            return np.asarray((flat[:, None, :] <= q[None, :, :]).mean(axis=0))

        max_rhat = float(np.nanmax([p["r_hat"] for p in found]))
        ess = np.array([p["ess_bulk"] for p in found])
    else:
        mean, sd = flat.mean(axis=0), flat.std(axis=0)
        chained = _as_chains(sampler, case.dim, options, warmup, draws)
        mcse = per_parameter(mcse_mean, chained)

        def below_fraction(q: FloatArray) -> FloatArray:
            return np.asarray((flat[:, None, :] <= q[None, :, :]).mean(axis=0))

        max_rhat = float(np.nanmax(per_parameter(rhat, chained)))
        ess = per_parameter(ess_bulk, chained)
    mean_error = None
    if case.mean is not None:
        mean_error = float(np.max(np.abs(mean - case.mean) / mcse))
    sd_ratio = None
    if case.sd is not None:
        ratio = sd / case.sd
        sd_ratio = (float(ratio.min()), float(ratio.max()))
    quantile_z = None
    if case.quantiles is not None:
        below = below_fraction(case.quantiles)
        se = np.sqrt(LEVELS * (1 - LEVELS))[:, None] / np.sqrt(ess)[None, :]
        quantile_z = float(np.max(np.abs(below - LEVELS[:, None]) / se))
    coverage_error = None
    if case.coverage is not None and not sampler.weighted:
        coverage_error = float(np.median([quantile_error(case.coverage(chain)) for chain in draws]))
    evaluations = chains * (warmup + iterations)
    return CaseResult(
        target=case.name,
        algorithm=algorithm,
        hard=case.hard,
        evaluations=evaluations,
        seconds=round(seconds, 2),
        warnings=codes,
        max_rhat=max_rhat,
        min_ess_per_1000=float(np.nanmin(ess) / evaluations * 1000),
        max_mean_error_mcse=mean_error,
        sd_ratio=sd_ratio,
        max_quantile_error_se=quantile_z,
        coverage_error=coverage_error,
    )
