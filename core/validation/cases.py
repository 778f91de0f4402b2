"""The validation suite's cases (:func:`cases`): targets with known answers, each with the
exact gradient of its log density, and known hard cases on which a sampler need not be
right but must say so. :mod:`core.validation.suite` runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from kameleon.core.interface.chain import FloatArray
from kameleon.core.validation.targets import Banana, Flower, Gaussian

__all__ = ["LEVELS", "Case", "cases"]

#: Quantile levels of :attr:`Case.quantiles`.
LEVELS = np.array([0.1, 0.25, 0.5, 0.75, 0.9])

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
