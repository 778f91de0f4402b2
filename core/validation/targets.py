"""Benchmark targets with known answers.

``Gaussian``
    A correlated Gaussian ``N(mean, covariance)``.
``Banana``
    The twisted Gaussian ``B(b, v)`` of Haario, Saksman and Tamminen (1999, "Adaptive
    proposal distribution for random walk Metropolis algorithm", Computational
    Statistics 14), as used by Sejdinovic et al. (2014, "Kernel adaptive
    Metropolis-Hastings") and Strathmann et al. (2015, "Gradient-free Hamiltonian Monte
    Carlo with efficient kernel exponential families").
``Flower``
    The flower ``F(r0, A, omega, sigma)`` of Sejdinovic et al. (2014).
``PseudoMarginal``
    Any target seen only through the log of a noisy, unbiased estimate of its density,
    ``logdensity(x, rng)``.

The first three have ``dim`` and ``logdensity(x) -> float``, its exact gradient
``gradient(x)`` (a float64 array of shape ``(dim,)``, for gradient samplers), a vectorised
``logdensity_rows`` over the rows of an ``(n, dim)`` array, the true ``mean`` and
``variance`` where they are known, exact draws ``sample(n, rng)`` where a simple
transform gives them, and a quantile-coverage metric (Sejdinovic et al. 2014): a map
``u(x)`` whose squared norm has a known chi-squared law; the fraction ``p_q`` of draws
with ``||u||^2`` below that law's ``q``-quantile should be ``q``, and
:func:`quantile_error` is the mean of ``|p_q - q|`` over ``q = 0.1, ..., 0.9``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import linalg, stats

from kameleon.core.interface.chain import FloatArray, frozen_array

__all__ = [
    "QUANTILE_LEVELS",
    "Banana",
    "Flower",
    "Gaussian",
    "PseudoMarginal",
    "Target",
    "quantile_error",
]

QUANTILE_LEVELS: FloatArray = frozen_array(np.arange(1, 10) / 10)
_LOG_2PI = math.log(2 * math.pi)


class Target(Protocol):
    """What a sampler needs from a target."""

    @property
    def dim(self) -> int: ...

    def logdensity(self, x: npt.ArrayLike) -> float: ...


def _rows(x: npt.ArrayLike, dim: int) -> FloatArray:
    """``x`` as a float64 array of shape ``(n, dim)``."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"expected an array of shape (n, {dim}), got {arr.shape}")
    return arr


def _point(x: npt.ArrayLike, dim: int) -> FloatArray:
    """``x`` as a float64 array of shape ``(1, dim)``."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != (dim,):
        raise ValueError(f"expected a point of shape ({dim},), got {arr.shape}")
    return arr[np.newaxis, :]


def _coverage(squared_norms: FloatArray, dof: int, levels: npt.ArrayLike) -> FloatArray:
    """Fraction of ``squared_norms`` below the chi-squared(``dof``) quantiles at ``levels``."""
    thresholds = stats.chi2.ppf(np.asarray(levels, dtype=np.float64), dof)
    coverage: FloatArray = np.mean(squared_norms[:, np.newaxis] <= thresholds, axis=0)
    return coverage


def _squared_norms(u: FloatArray) -> FloatArray:
    """``||u_i||^2`` for each row ``u_i``."""
    norms: FloatArray = np.sum(u**2, axis=1)
    return norms


def quantile_error(coverage: npt.ArrayLike, levels: npt.ArrayLike = QUANTILE_LEVELS) -> float:
    """Mean of ``|p_q - q|``: the summary of a target's ``quantile_coverage``."""
    return float(np.mean(np.abs(np.asarray(coverage) - np.asarray(levels))))


@dataclass(frozen=True, eq=False, init=False)
class Gaussian:
    """The Gaussian ``N(mean, covariance)``.

    Its quantile metric uses ``u = L^-1 (x - mean)`` with ``L L^T = covariance``:
    ``||u||^2 ~ chi2_d`` exactly.
    """

    mean: FloatArray
    covariance: FloatArray
    _cholesky: FloatArray = field(repr=False)
    _whitening: FloatArray = field(repr=False)  # L^-1
    _log_normaliser: float = field(repr=False)

    def __init__(self, mean: npt.ArrayLike, covariance: npt.ArrayLike) -> None:
        mu, sigma = frozen_array(mean), frozen_array(covariance)
        if mu.ndim != 1 or sigma.shape != (mu.size, mu.size):
            raise ValueError("mean must have shape (d,) and covariance shape (d, d)")
        try:
            cholesky = frozen_array(np.linalg.cholesky(sigma))
        except np.linalg.LinAlgError as exc:
            raise ValueError("covariance must be positive definite") from exc
        whitening = linalg.solve_triangular(cholesky, np.eye(mu.size), lower=True)
        log_det = 2 * float(np.sum(np.log(np.diag(cholesky))))
        object.__setattr__(self, "mean", mu)
        object.__setattr__(self, "covariance", sigma)
        object.__setattr__(self, "_cholesky", cholesky)
        object.__setattr__(self, "_whitening", frozen_array(whitening))
        object.__setattr__(self, "_log_normaliser", -0.5 * (log_det + mu.size * _LOG_2PI))

    @property
    def dim(self) -> int:
        return int(self.mean.size)

    @property
    def variance(self) -> FloatArray:
        return frozen_array(np.diag(self.covariance))

    def standardise(self, x: npt.ArrayLike) -> FloatArray:
        """``u = L^-1 (x - mean)`` for each row of ``x``: standard normal under the target."""
        return (_rows(x, self.dim) - self.mean) @ self._whitening.T

    def logdensity_rows(self, x: npt.ArrayLike) -> FloatArray:
        return self._log_normaliser - 0.5 * _squared_norms(self.standardise(x))

    def logdensity(self, x: npt.ArrayLike) -> float:
        return float(self.logdensity_rows(_point(x, self.dim))[0])

    def gradient(self, x: npt.ArrayLike) -> FloatArray:
        """``grad log pi(x) = -P (x - mean)`` with the precision ``P = L^-T L^-1``, shape
        ``(dim,)``. Far out (``|x|`` near the float range) it overflows to infinities
        (or nans) without a warning, as the log density does to ``-inf``."""
        with np.errstate(over="ignore", invalid="ignore"):
            u = self._whitening @ (_point(x, self.dim)[0] - self.mean)
            g: FloatArray = -(self._whitening.T @ u)
        return g

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` independent draws, shape ``(n, dim)``."""
        return self.mean + rng.standard_normal((n, self.dim)) @ self._cholesky.T

    def quantile_coverage(
        self, x: npt.ArrayLike, levels: npt.ArrayLike = QUANTILE_LEVELS
    ) -> FloatArray:
        """``p_q`` for each level ``q`` (exact: the truth is ``q``)."""
        return _coverage(_squared_norms(self.standardise(x)), self.dim, levels)


@dataclass(frozen=True)
class Banana:
    """The banana ``B(b, v)`` in ``dim >= 2`` dimensions.

    ``X ~ N(0, diag(v, 1, ..., 1))`` twisted by ``Y_2 = X_2 + b (X_1^2 - v)``, other
    coordinates unchanged. The map has unit Jacobian, so the density is normalised:

        ``log pi(y) = -1/2 [y_1^2 / v + (y_2 - b (y_1^2 - v))^2 + sum_{j>=3} y_j^2]
        - (d / 2) log(2 pi) - 1/2 log v``.

    The mean is 0; ``Var Y_1 = v``, ``Var Y_2 = 1 + 2 b^2 v^2``, the other variances are
    1 and all covariances 0. The quantile metric maps back to
    ``u = (y_1 / sqrt(v), y_2 - b (y_1^2 - v), y_3, ...)``, standard normal under the
    target, so ``||u||^2 ~ chi2_d`` exactly.
    """

    dim: int
    b: float = 0.03
    v: float = 100.0

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise ValueError("the banana needs dim >= 2")
        if not self.v > 0:
            raise ValueError("v must be positive")

    @property
    def mean(self) -> FloatArray:
        return frozen_array(np.zeros(self.dim))

    @property
    def variance(self) -> FloatArray:
        variance = np.ones(self.dim)
        variance[0] = self.v
        variance[1] = 1 + 2 * self.b**2 * self.v**2
        return frozen_array(variance)

    def standardise(self, y: npt.ArrayLike) -> FloatArray:
        """``u(y)`` for each row of ``y``: standard normal under the target."""
        u = _rows(y, self.dim).copy()
        u[:, 1] -= self.b * (u[:, 0] ** 2 - self.v)
        u[:, 0] /= math.sqrt(self.v)
        return u

    def logdensity_rows(self, y: npt.ArrayLike) -> FloatArray:
        normaliser = -0.5 * (self.dim * _LOG_2PI + math.log(self.v))
        return normaliser - 0.5 * _squared_norms(self.standardise(y))

    def logdensity(self, y: npt.ArrayLike) -> float:
        return float(self.logdensity_rows(_point(y, self.dim))[0])

    def gradient(self, y: npt.ArrayLike) -> FloatArray:
        """``grad log pi(y)``, shape ``(dim,)``: with ``w = y_2 - b (y_1^2 - v)``,

            ``(-y_1 / v + 2 b y_1 w, -w, -y_3, ..., -y_d)``.

        Far out it overflows to infinities (or nans) without a warning."""
        g: FloatArray = -_point(y, self.dim)[0]
        with np.errstate(over="ignore", invalid="ignore"):
            y1 = -g[0]
            w = -g[1] - self.b * (y1 * y1 - self.v)
            g[0] = -y1 / self.v + 2 * self.b * y1 * w
            g[1] = -w
        return g

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` independent draws by the exact transform, shape ``(n, dim)``."""
        y = rng.standard_normal((n, self.dim))
        y[:, 0] *= math.sqrt(self.v)
        y[:, 1] += self.b * (y[:, 0] ** 2 - self.v)
        return y

    def quantile_coverage(
        self, y: npt.ArrayLike, levels: npt.ArrayLike = QUANTILE_LEVELS
    ) -> FloatArray:
        """``p_q`` for each level ``q`` (exact: the truth is ``q``)."""
        return _coverage(_squared_norms(self.standardise(y)), self.dim, levels)


@dataclass(frozen=True)
class Flower:
    """The flower ``F(r0, A, omega, sigma)`` in ``dim >= 2`` dimensions (unnormalised).

        ``log pi(x) = -(r - r0 - A cos(omega theta))^2 / (2 sigma^2) - 1/2 sum_{j>=3} x_j^2``

    with ``(r, theta)`` the polar coordinates of ``(x_1, x_2)`` only. This is the paper's
    formula; the reference code took ``r`` as the norm of all of ``x``, which couples
    the extra coordinates to the flower. The default is the paper's ``F(10, 6, 6, 1)``.

    The mean is 0 when the flower has a rotational symmetry (``|omega|`` an integer >= 2;
    or ``A = 0`` or ``omega = 0``, a ring), and ``None`` otherwise. The variances of
    ``x_1, x_2`` have no closed form, so ``variance`` is not given.

    The quantile metric is only **approximate**: it treats
    ``((r - r0 - A cos(omega theta)) / sigma, x_3, ..., x_d)`` as standard normal, so
    ``||u||^2 ~ chi2_{d-1}``, ignoring the Jacobian ``r`` of the polar coordinates and
    the constraint ``r > 0``.
    """

    dim: int
    radius: float = 10.0
    amplitude: float = 6.0
    frequency: float = 6.0
    sigma: float = 1.0

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise ValueError("the flower needs dim >= 2")
        if not self.sigma > 0:
            raise ValueError("sigma must be positive")

    @property
    def mean(self) -> FloatArray | None:
        omega = abs(float(self.frequency))
        symmetric = self.amplitude == 0 or omega == 0 or (omega >= 2 and omega.is_integer())
        return frozen_array(np.zeros(self.dim)) if symmetric else None

    def standardise(self, x: npt.ArrayLike) -> FloatArray:
        """``((r - mu(theta)) / sigma, x_3, ..., x_d)`` for each row of ``x``."""
        rows = _rows(x, self.dim)
        r = np.hypot(rows[:, 0], rows[:, 1])
        theta = np.arctan2(rows[:, 1], rows[:, 0])
        ridge = self.radius + self.amplitude * np.cos(self.frequency * theta)
        return np.column_stack([(r - ridge) / self.sigma, rows[:, 2:]])

    def logdensity_rows(self, x: npt.ArrayLike) -> FloatArray:
        return -0.5 * _squared_norms(self.standardise(x))

    def gradient(self, x: npt.ArrayLike) -> FloatArray:
        """``grad log pi(x)``, shape ``(dim,)``. With ``e = (r - r0 - A cos(omega theta))
        / sigma^2``, ``dr/dx = (x_1, x_2) / r`` and ``dtheta/dx = (-x_2, x_1) / r^2``:

            ``d/dx_{1,2} = -e (dr/dx + A omega sin(omega theta) dtheta/dx)``,
            ``d/dx_j = -x_j`` for ``j >= 3``.

        At the origin, where the log density is not differentiable (``theta`` jumps), the
        first two entries are 0. Far out it overflows to infinities (or nans) without a
        warning."""
        p = _point(x, self.dim)[0]
        g: FloatArray = -p
        x1, x2 = float(p[0]), float(p[1])
        r = math.hypot(x1, x2)
        if r == 0:
            g[:2] = 0.0
            return g
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            theta = math.atan2(x2, x1)
            scale = max(abs(x1), abs(x2))  # cos and sin of theta even where r overflows
            unit = math.hypot(x1 / scale, x2 / scale)
            c1, c2 = np.float64(x1 / scale / unit), np.float64(x2 / scale / unit)
            angle = self.frequency * theta
            ridge = self.radius + self.amplitude * math.cos(angle)
            e = (np.float64(r) - ridge) / np.float64(self.sigma) ** 2
            k = self.amplitude * self.frequency * math.sin(angle)
            g[0] = -e * (c1 - k * (c2 / np.float64(r)))
            g[1] = -e * (c2 + k * (c1 / np.float64(r)))
        return g

    def logdensity(self, x: npt.ArrayLike) -> float:
        return float(self.logdensity_rows(_point(x, self.dim))[0])

    def quantile_coverage(
        self, x: npt.ArrayLike, levels: npt.ArrayLike = QUANTILE_LEVELS
    ) -> FloatArray:
        """``p_q`` for each level ``q`` (approximate, see the class docstring)."""
        return _coverage(_squared_norms(self.standardise(x)), self.dim - 1, levels)


@dataclass(frozen=True)
class PseudoMarginal:
    """``target`` seen through a noisy, unbiased estimate of its density.

    ``logdensity(x, rng)`` returns ``log pi(x) + log W`` with ``log W ~ N(-s^2/2, s^2)``,
    so that ``E[W] = 1``: the log of an unbiased estimate of ``pi(x)``, as in
    pseudo-marginal MCMC (Andrieu and Roberts 2009). ``s`` is ``noise_sd``.
    """

    target: Target
    noise_sd: float

    def __post_init__(self) -> None:
        if not self.noise_sd >= 0:
            raise ValueError("noise_sd must be non-negative")

    @property
    def dim(self) -> int:
        return self.target.dim

    def logdensity(self, x: npt.ArrayLike, rng: np.random.Generator) -> float:
        """The log of a fresh unbiased estimate of the target's density at ``x``."""
        return self.target.logdensity(x) + float(rng.normal(-0.5 * self.noise_sd**2, self.noise_sd))
