"""The validation suite: targets with known answers, and known hard cases on which a
sampler need not be right but must say so.

:func:`cases` lists them; :func:`run_case` runs one sampler on one case in process and
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.assess import summaries_of
from kameleon.core.diagnostics.autocorr import by_walker
from kameleon.core.diagnostics.findings import SamplingWarning
from kameleon.core.diagnostics.summary import MIN_DRAWS, ess_bulk, mcse_mean, per_parameter, rhat
from kameleon.core.interface.chain import FloatArray
from kameleon.core.interface.sampler import Sampler
from kameleon.core.running.inprocess import assess_results, sample_chains
from kameleon.core.validation.targets import Banana, Flower, Gaussian, quantile_error

__all__ = ["LEVELS", "Case", "CaseResult", "cases", "run_case"]

LogDensity = Callable[[FloatArray], float]
Gradient = Callable[[FloatArray], FloatArray]


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
        (``quantile_coverage`` of :mod:`core.validation.targets`): its mean error over the levels
        0.1..0.9 is reported, not judged.
    hard
        A known hard case: no Markov chain here need be right, every one must warn.
        Weighted draws (importance sampling) may instead be right, judged by the true
        ``mean`` and ``sd`` where they are given (the separated mixture's are).
    gradient
        The exact gradient of ``logdensity``, shape ``(dim,)``, for gradient samplers;
        where the log density is ``-inf`` it is not used (zeros there).
    """

    name: str
    dim: int
    logdensity: LogDensity = field(repr=False)
    mean: FloatArray | None = field(default=None, repr=False)
    sd: FloatArray | None = field(default=None, repr=False)
    quantiles: FloatArray | None = field(default=None, repr=False)
    coverage: Callable[[FloatArray], FloatArray] | None = field(default=None, repr=False)
    hard: bool = False
    gradient: Gradient | None = field(default=None, repr=False)


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
        gradient=g.gradient,
    )


def _student_t(x: FloatArray) -> float:
    """Multivariate Student-t with 3 degrees of freedom in 4 dimensions (sd sqrt(3))."""
    return -0.5 * (3 + 4) * math.log1p(float(x @ x) / 3)


def _student_t_gradient(x: FloatArray) -> FloatArray:
    """``-7 x / (3 + |x|^2)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        g: FloatArray = -7.0 * np.asarray(x, dtype=np.float64) / (3 + float(x @ x))
    return g


def _funnel(x: FloatArray) -> float:
    """Neal's funnel: ``v ~ N(0, 3^2)``, ``x_i | v ~ N(0, e^v)``."""
    v = float(x[0])
    squares = float(np.sum(x[1:] ** 2))
    # e^-v overflows for v < -709, where the density is 0 unless x_2.. are all 0: the
    # value IEEE arithmetic gives, not an OverflowError.
    spread = math.exp(-v) if v > -700 else math.inf
    conditional = 0.5 * squares * spread if squares > 0 else 0.0
    return -v * v / 18 - conditional - 0.5 * (x.size - 1) * v


def _funnel_gradient(x: FloatArray) -> FloatArray:
    """``d/dv = -v / 9 + |x_2..|^2 e^-v / 2 - (d - 1) / 2`` and ``d/dx_i = -x_i e^-v``
    where :func:`_funnel` is finite (it is then finite too); zeros where it is ``-inf``."""
    x = np.asarray(x, dtype=np.float64)
    if not math.isfinite(_funnel(x)):
        return np.zeros(x.size)
    v = float(x[0])
    squares = float(np.sum(x[1:] ** 2))
    g = np.empty(x.size)
    if v > -700:
        spread = math.exp(-v)
        g[0] = -v / 9 + 0.5 * squares * spread - 0.5 * (x.size - 1)
        g[1:] = -x[1:] * spread
    else:  # finite only with x_2.. all 0, as _funnel takes e^-v to be inf there
        g[0] = -v / 9 - 0.5 * (x.size - 1)
        g[1:] = 0.0
    return g


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
    spread = float(np.sum((theta - mu) ** 2))
    if tau * tau == 0:
        # log tau < -372: tau^2 underflows. The density is 0 unless every theta is mu
        # (the value IEEE arithmetic gives for spread / 0, not a ZeroDivisionError).
        return -math.inf if spread > 0 else prior - 8 * log_tau + _schools_likelihood(theta)
    hierarchy = -spread / (2 * tau * tau) - 8 * log_tau
    return prior + hierarchy + _schools_likelihood(theta)


def _schools_likelihood(theta: FloatArray) -> float:
    return -float(np.sum((_SCHOOLS_Y - theta) ** 2 / (2 * _SCHOOLS_SIGMA**2)))


def _eight_schools_gradient(z: FloatArray) -> FloatArray:
    """With ``s = log tau`` and ``S = sum_j (theta_j - mu)^2``: ``d/dmu = -mu / 25 +
    sum_j (theta_j - mu) / tau^2``, ``d/ds = 1 - 2 (tau/5)^2 / (1 + (tau/5)^2) + S / tau^2
    - 8``, ``d/dtheta_j = -(theta_j - mu) / tau^2 + (y_j - theta_j) / sigma_j^2``, where
    :func:`_eight_schools` is finite; zeros where it is ``-inf``."""
    z = np.asarray(z, dtype=np.float64)
    if not math.isfinite(_eight_schools(z)):
        return np.zeros(z.size)
    mu, log_tau, theta = float(z[0]), float(z[1]), z[2:]
    tau = math.exp(log_tau)
    ratio = (tau / 5) ** 2
    g = np.empty(z.size)
    data = (_SCHOOLS_Y - theta) / _SCHOOLS_SIGMA**2
    if tau * tau == 0:  # finite only with every theta equal to mu
        g[0] = -mu / 25
        g[1] = 1 - 2 * ratio / (1 + ratio) - 8
        g[2:] = data
        return g
    deviation = theta - mu
    precision = 1 / (tau * tau)
    with np.errstate(over="ignore"):
        g[0] = -mu / 25 + float(np.sum(deviation)) * precision
        g[1] = 1 - 2 * ratio / (1 + ratio) + float(np.sum(deviation**2)) * precision - 8
        g[2:] = -deviation * precision + data
    return g


def _mixture(x: FloatArray) -> float:
    """Equal mixture of ``N(4 * 1, I)`` and ``N(-4 * 1, I)`` in 2 dimensions."""
    a = -0.5 * float(np.sum((x - 4) ** 2))
    b = -0.5 * float(np.sum((x + 4) ** 2))
    return max(a, b) + math.log1p(math.exp(-abs(a - b)))


def _mixture_gradient(x: FloatArray) -> FloatArray:
    """``-x + 4 tanh(4 sum_i x_i)``: the weights of the two components' gradients
    ``-(x - 4)`` and ``-(x + 4)`` are ``sigmoid(+-(a - b))`` with ``a - b = 8 sum_i x_i``,
    so ``w_a - w_b = tanh(4 sum_i x_i)`` (no overflow anywhere)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        g: FloatArray = -x + 4 * math.tanh(4 * float(np.sum(x)))
    return g


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
                gradient=banana.gradient,
            )
        )
    flower = Flower(2)
    out.append(
        Case("flower-F(10,6,6,1)-2d", 2, flower.logdensity, np.zeros(2), gradient=flower.gradient)
    )
    t3 = np.repeat(stats.t(3).ppf(LEVELS)[:, None], 4, axis=1)
    out.append(
        Case(
            "student-t3-4d",
            4,
            _student_t,
            np.zeros(4),
            quantiles=t3,
            gradient=_student_t_gradient,
        )
    )
    out.append(Case("funnel-5d", 5, _funnel, hard=True, gradient=_funnel_gradient))
    out.append(
        Case(
            "eight-schools-centred-10d",
            10,
            _eight_schools,
            hard=True,
            gradient=_eight_schools_gradient,
        )
    )
    out.append(
        Case(
            "mixture-separated-2d",
            2,
            _mixture,
            mean=np.zeros(2),
            sd=np.full(2, math.sqrt(17.0)),  # each component's 1, plus the modes' 4^2
            hard=True,
            gradient=_mixture_gradient,
        )
    )
    return out


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
