"""The validation suite: targets with known answers, and known hard cases on which a
sampler need not be right but must say so.

:func:`cases` lists them; :func:`run_case` runs one sampler on one case in process and
measures it against the truth. ``tests/core/test_validation.py`` runs a reduced suite in
CI; ``bench/validation.py`` runs the full one and writes the table in BENCHMARKS.md.

A sampler is **right** on a case with a known answer when every parameter's pooled
post-warm-up mean is within 4 Monte Carlo standard errors of the truth, every sd within
10 % of it, and, where marginal quantiles are known (heavy tails, whose sample sd is no
guide), the fraction of draws below each true quantile within 4 standard errors of its
level (the standard error ``sqrt(q (1 - q) / ESS)`` with the bulk ESS). Whatever the
case, a sampler that is not right must say so: a warning (:mod:`core.checks`). On a **hard** case (Neal's funnel, the centred eight-schools
hierarchy, a well-separated two-component mixture) it must raise at least one
convergence warning (:mod:`core.checks`): a confident clean exit there is the failure.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from kameleon.core.base import FloatArray
from kameleon.core.checks import SamplingWarning
from kameleon.core.diagnostics import ess_bulk, mcse_mean, per_parameter, rhat
from kameleon.core.run import sample
from kameleon.core.targets import Banana, Flower, Gaussian, quantile_error

__all__ = ["LEVELS", "Case", "CaseResult", "cases", "run_case"]

LogDensity = Callable[[FloatArray], float]


@dataclass(frozen=True)
class Case:
    """A target of the suite.

    Attributes
    ----------
    name, dim, logdensity
        The target.
    mean, sd
        The true mean and standard deviations, where known (``None`` otherwise).
    quantiles
        True marginal quantiles at :data:`LEVELS`, shape ``(len(LEVELS), dim)``, where
        known: for heavy tails, whose sample sd converges too slowly to judge by.
    coverage
        The quantile-coverage metric of the MCMC Kameleon paper, where exact
        (``quantile_coverage`` of :mod:`core.targets`): its mean error over the levels
        0.1..0.9 is reported, not judged.
    hard
        A known hard case: no sampler here need be right, every one must warn.
    """

    name: str
    dim: int
    logdensity: LogDensity = field(repr=False)
    mean: FloatArray | None = field(default=None, repr=False)
    sd: FloatArray | None = field(default=None, repr=False)
    quantiles: FloatArray | None = field(default=None, repr=False)
    coverage: Callable[[FloatArray], FloatArray] | None = field(default=None, repr=False)
    hard: bool = False


#: Quantile levels of :attr:`Case.quantiles`.
LEVELS = np.array([0.1, 0.25, 0.5, 0.75, 0.9])


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


def _rotation(d: int, seed: int) -> FloatArray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def _gaussian(name: str, covariance: FloatArray) -> Case:
    g = Gaussian(np.zeros(len(covariance)), covariance)
    return Case(
        name,
        g.dim,
        g.logdensity,
        np.zeros(g.dim),
        np.sqrt(np.diag(covariance)),
        coverage=g.quantile_coverage,
    )


def _student_t(x: FloatArray) -> float:
    """Multivariate Student-t with 3 degrees of freedom in 4 dimensions (sd sqrt(3))."""
    return -0.5 * (3 + 4) * math.log1p(float(x @ x) / 3)


def _funnel(x: FloatArray) -> float:
    """Neal's funnel: ``v ~ N(0, 3^2)``, ``x_i | v ~ N(0, e^v)``."""
    v = float(x[0])
    squares = float(np.sum(x[1:] ** 2))
    # e^-v overflows for v < -709, where the density is 0 unless x_2.. are all 0: the
    # value IEEE arithmetic gives, not an OverflowError.
    spread = math.exp(-v) if v > -700 else math.inf
    conditional = 0.5 * squares * spread if squares > 0 else 0.0
    return -v * v / 18 - conditional - 0.5 * (x.size - 1) * v


_SCHOOLS_Y = np.array([28, 8, -3, 7, -1, 1, 18, 12], dtype=np.float64)
_SCHOOLS_SIGMA = np.array([15, 10, 16, 11, 9, 11, 10, 18], dtype=np.float64)


def _eight_schools(z: FloatArray) -> float:
    """The centred eight-schools model in ``(mu, log tau, theta_1..8)``: ``mu ~ N(0, 5^2)``,
    ``tau ~ half-Cauchy(5)``, ``theta_j ~ N(mu, tau^2)``, ``y_j ~ N(theta_j, sigma_j^2)``.
    Its posterior has a funnel between ``log tau`` and the ``theta``."""
    mu, log_tau, theta = float(z[0]), float(z[1]), z[2:]
    if log_tau > 20:
        return -math.inf
    tau = math.exp(log_tau)
    prior = -mu * mu / 50 - math.log1p((tau / 5) ** 2) + log_tau
    hierarchy = -float(np.sum((theta - mu) ** 2)) / (2 * tau * tau) - 8 * log_tau
    likelihood = -float(np.sum((_SCHOOLS_Y - theta) ** 2 / (2 * _SCHOOLS_SIGMA**2)))
    return prior + hierarchy + likelihood


def _mixture(x: FloatArray) -> float:
    """Equal mixture of ``N(4 * 1, I)`` and ``N(-4 * 1, I)`` in 2 dimensions."""
    a = -0.5 * float(np.sum((x - 4) ** 2))
    b = -0.5 * float(np.sum((x + 4) ** 2))
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def cases() -> list[Case]:
    """Every case of the suite, known answers first, then the hard ones."""
    sd6 = np.logspace(-3, 2, 6)
    q = _rotation(6, 5)
    c = q @ np.diag(np.linspace(0.2, 3, 6)) @ q.T
    correlation = c / np.sqrt(np.outer(np.diag(c), np.diag(c)))
    q4 = _rotation(4, 7)
    rotated = q4 @ np.diag(np.logspace(-3, 3, 4) ** 2) @ q4.T
    out = [
        _gaussian("gaussian-scales-1e-3..1e2-correlated-6d", np.outer(sd6, sd6) * correlation),
        _gaussian("gaussian-scales-1e-3..1e3-rotated-4d", 0.5 * (rotated + rotated.T)),
        _gaussian("gaussian-rho-0.999-2d", np.array([[1.0, 0.999], [0.999, 1.0]])),
    ]
    for b in (0.1, 0.03):
        banana = Banana(8, b=b, v=100.0)
        out.append(
            Case(
                f"banana-B({b},100)-8d",
                8,
                banana.logdensity,
                banana.mean,
                np.sqrt(banana.variance),
                coverage=banana.quantile_coverage,
            )
        )
    flower = Flower(2)
    out.append(Case("flower-F(10,6,6,1)-2d", 2, flower.logdensity, np.zeros(2)))
    t3 = np.repeat(stats.t(3).ppf(LEVELS)[:, None], 4, axis=1)
    out.append(Case("student-t3-4d", 4, _student_t, np.zeros(4), quantiles=t3))
    out.append(Case("funnel-5d", 5, _funnel, hard=True))
    out.append(Case("eight-schools-centred-10d", 10, _eight_schools, hard=True))
    out.append(Case("mixture-separated-2d", 2, _mixture, hard=True))
    return out


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
    """Run ``algorithm`` on ``case`` in process and measure it."""
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            draws = sample(
                case.logdensity,
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
    flat = draws.reshape(-1, case.dim)
    mean_error = None
    if case.mean is not None:
        z = np.abs(flat.mean(axis=0) - case.mean) / per_parameter(mcse_mean, draws)
        mean_error = float(np.max(z))
    sd_ratio = None
    if case.sd is not None:
        ratio = flat.std(axis=0) / case.sd
        sd_ratio = (float(ratio.min()), float(ratio.max()))
    quantile_z = None
    if case.quantiles is not None:
        ess = per_parameter(ess_bulk, draws)
        below = (flat[:, None, :] <= case.quantiles[None, :, :]).mean(axis=0)
        se = np.sqrt(LEVELS * (1 - LEVELS))[:, None] / np.sqrt(ess)[None, :]
        quantile_z = float(np.max(np.abs(below - LEVELS[:, None]) / se))
    coverage_error = None
    if case.coverage is not None:
        coverage_error = float(np.median([quantile_error(case.coverage(chain)) for chain in draws]))
    evaluations = chains * (warmup + iterations)
    return CaseResult(
        target=case.name,
        algorithm=algorithm,
        hard=case.hard,
        evaluations=evaluations,
        seconds=round(seconds, 2),
        warnings=codes,
        max_rhat=float(np.nanmax(per_parameter(rhat, draws))),
        min_ess_per_1000=float(np.nanmin(per_parameter(ess_bulk, draws)) / evaluations * 1000),
        max_mean_error_mcse=mean_error,
        sd_ratio=sd_ratio,
        max_quantile_error_se=quantile_z,
        coverage_error=coverage_error,
    )
