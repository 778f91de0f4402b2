"""Score-matching fits of Gaussian kernel exponential families, as kernel HMC uses them.

Kernel Hamiltonian Monte Carlo (Strathmann, Sejdinovic, Livingstone, Szabo and Gretton
2015, "Gradient-free Hamiltonian Monte Carlo with efficient kernel exponential
families") runs Hamiltonian dynamics on the gradient of a surrogate ``f`` with
``log pi(x) ~ f(x) + const``, fitted to the chain's history by minimising Hyvarinen's
score-matching objective

    J(f) = (1/N) sum_i sum_l [ d^2 f / dx_l^2 (x_i) + (1/2) (d f / dx_l (x_i))^2 ],

which needs no normalising constant. Two estimators:

lite (dual)
    ``f(x) = sum_i alpha_i k(z_i, x)`` on ``n`` centres ``z_i``, a subsample of the
    history. Closed-form ``alpha`` from an ``n x n`` system; a fit costs
    ``O(n^3 + d n^2)`` time and ``O(n^2)`` memory.
finite (primal)
    ``f(x) = theta^T phi(x)`` with ``m`` random Fourier features
    ``phi(x) = sqrt(2/m) cos(Omega^T x + u)``, ``omega_j ~ N(0, l^-2 I)``,
    ``u_j ~ U[0, 2 pi)``. The sufficient statistics are updated online, ``O(d m^2)``
    per point, so the history need not be kept.

Both use the Gaussian kernel with the canonical bandwidth ``l`` of :mod:`core.kernels.rkhs`,
``k(x, y) = exp(-||x - y||^2 / (2 l^2))``. The lite formulas of the paper are written
for ``exp(-||x - y||^2 / sigma)``, so ``sigma = 2 l^2`` here (a squared scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kameleon.core.interface.chain import FloatArray
from kameleon.core.kernels.rkhs import gaussian_kernel, gaussian_kernel_grad
from kameleon.core.numerics.arithmetic import cos, exp, sin
from kameleon.core.numerics.matrices import (
    cholesky,
    dot,
    matmul,
    matvec,
    solve_lower,
    solve_upper,
    squared_distances,
    vecmat,
)

__all__ = [
    "FiniteSurrogate",
    "LiteSurrogate",
    "finite_initial",
    "finite_regularizer",
    "finite_solve",
    "finite_update",
    "fit_lite",
    "lite_objective",
    "lite_statistics",
    "random_features",
]


# --------------------------------------------------------------------------- lite


def lite_statistics(
    centres: FloatArray, bandwidth: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Kernel matrix ``K`` and the score-matching terms ``b`` and ``C`` of the lite fit.

    With ``sigma = 2 l^2`` and the centres as data, the objective of
    ``f = sum_i alpha_i k(z_i, .)`` is
    ``J(alpha) = 2/(n sigma) alpha^T b + 2/(n sigma^2) alpha^T C alpha`` where

    - ``b_i = sum_k K_ik ((2/sigma) ||z_i - z_k||^2 - d)``,
    - ``C_ij = sum_k K_ik K_jk (z_i - z_k) . (z_j - z_k)``.

    These are the paper's ``b = sum_l [(2/sigma)(K s_l + D_{s_l} K 1 - 2 D_{x_l} K x_l)
    - K 1]`` and ``C = sum_l (D_{x_l} K - K D_{x_l})(K D_{x_l} - D_{x_l} K)`` summed over
    the coordinates ``l`` in closed form, so the cost is ``O(d n^2)`` for the distances
    and two ``n x n`` matrix products, not ``d`` of them. Written with squared
    distances, they do not depend on where the origin is.

    Parameters
    ----------
    centres
        Shape ``(n, d)``.
    bandwidth
        The length scale ``l``.

    Returns
    -------
    K, b, C
        Shapes ``(n, n)``, ``(n,)``, ``(n, n)``.
    """
    z = np.asarray(centres, dtype=np.float64)
    sigma = 2.0 * bandwidth * bandwidth
    sq = squared_distances(z, z)
    K = exp(sq / -sigma)  # from sq, which b and C need too, not core.kernels.rkhs
    Ksq = K * sq
    b = (2.0 / sigma) * Ksq.sum(axis=1) - z.shape[1] * K.sum(axis=1)
    # (z_i - z_k).(z_j - z_k) = (|z_i - z_k|^2 + |z_j - z_k|^2 - |z_i - z_j|^2) / 2
    M = matmul(Ksq, K)
    C = 0.5 * (M + M.T - sq * matmul(K, K))
    return K, b, C


def lite_objective(alpha: FloatArray, b: FloatArray, C: FloatArray, bandwidth: float) -> float:
    """The lite score-matching objective ``J(alpha)`` (unregularised; see
    :func:`lite_statistics`)."""
    sigma = 2.0 * bandwidth * bandwidth
    n = alpha.shape[0]
    quadratic = dot(alpha, matvec(C, alpha))
    return float(2.0 / (n * sigma) * dot(alpha, b) + 2.0 / (n * sigma * sigma) * quadratic)


def fit_lite(centres: FloatArray, bandwidth: float, regularization: float) -> FloatArray:
    """Regularised lite score-matching fit ``alpha = -(sigma/2) (C + lam (K + I))^-1 b``.

    ``lam (K + I)`` penalises both ``||f||_H^2 = alpha^T K alpha`` and ``||alpha||^2``,
    as the reference code does. ``C`` grows with the number of centres and with the
    squared scale of the data, so a fixed ``lam`` would mean different things for
    different ``n``; here ``lam = regularization * tr(C) / n`` (the mean diagonal of
    ``C``), which makes ``regularization`` a dimensionless relative ridge.

    Parameters
    ----------
    centres
        Shape ``(n, d)``; at least two distinct rows.
    bandwidth
        The length scale ``l``.
    regularization
        The relative ridge, ``> 0``.

    Returns
    -------
    ndarray
        ``alpha``, shape ``(n,)``. ``O(n^3 + d n^2)`` time, ``O(n^2)`` memory.

    Raises
    ------
    FloatingPointError
        If the solution is not finite.
    """
    K, b, C = lite_statistics(centres, bandwidth)
    n = K.shape[0]
    lam = regularization * np.trace(C) / n
    A = C + lam * K
    A[np.diag_indices_from(A)] += lam
    L = cholesky(A)  # A = L L^T
    alpha: FloatArray = -bandwidth * bandwidth * solve_upper(L.T, solve_lower(L, b))
    if not np.all(np.isfinite(alpha)):
        raise FloatingPointError("lite score-matching solution is not finite")
    return alpha


@dataclass(frozen=True, slots=True)
class LiteSurrogate:
    """The lite surrogate ``f(x) = sum_i alpha_i k(z_i, x)``.

    Attributes
    ----------
    centres
        The ``z_i``, shape ``(n, d)``.
    alpha
        The weights (:func:`fit_lite`), shape ``(n,)``.
    bandwidth
        The length scale ``l``.
    """

    centres: FloatArray
    alpha: FloatArray
    bandwidth: float

    def logdensity(self, x: FloatArray) -> float:
        """``f(x)``, up to the unknown normalising constant; ``O(n d)``."""
        k = gaussian_kernel(self.centres, x, self.bandwidth)
        return dot(self.alpha, k[:, 0])

    def gradient(self, x: FloatArray) -> FloatArray:
        """``grad f(x) = sum_i alpha_i grad_x k(x, z_i)``; ``O(n d)``."""
        return vecmat(self.alpha, gaussian_kernel_grad(x, self.centres, self.bandwidth))


# --------------------------------------------------------------------------- finite


def random_features(
    rng: np.random.Generator, dim: int, num_features: int, bandwidth: float
) -> tuple[FloatArray, FloatArray]:
    """Random Fourier features of the Gaussian kernel with bandwidth ``l``.

    Returns ``(omega, phase)`` of shapes ``(d, m)`` and ``(m,)``: ``omega_j ~ N(0, l^-2 I)``
    and ``phase_j ~ U[0, 2 pi)``, so that ``phi(x)^T phi(y) -> k(x, y)`` as ``m`` grows
    (Rahimi and Recht 2007).
    """
    omega = rng.standard_normal((dim, num_features)) / bandwidth
    phase = rng.uniform(0.0, 2.0 * math.pi, num_features)
    return omega, phase


def finite_regularizer(omega: FloatArray, regularization: float) -> float:
    """The ridge ``lam_0 = regularization * sum_j ||omega_j||^2 / m^2`` of the finite fit.

    ``sum_j ||omega_j||^2 / m^2`` is the mean eigenvalue of one point's expected
    contribution to ``C`` (see :func:`finite_update`), so ``regularization = 1`` is a
    ridge the size of one isotropic "fake observation", as in the reference code.
    """
    m = omega.shape[1]
    return float(regularization * float(np.add.reduce(np.ravel(omega * omega))) / (m * m))


def finite_initial(omega: FloatArray, regularization: float) -> tuple[FloatArray, FloatArray]:
    """Statistics before any data: ``R = sqrt(lam_0) I`` and ``b = 0`` (see
    :func:`finite_update`)."""
    m = omega.shape[1]
    R = math.sqrt(finite_regularizer(omega, regularization)) * np.eye(m)
    return R, np.zeros(m)


def _feature_argument(points: FloatArray, omega: FloatArray, phase: FloatArray) -> FloatArray:
    """``Omega^T x + u`` for each row ``x`` of ``points``, shape ``(k, m)``; the features
    are ``sqrt(2/m) cos`` of it."""
    arg: FloatArray = matmul(np.atleast_2d(points), omega)
    arg += phase
    return arg


def finite_update(
    factor: FloatArray,
    b: FloatArray,
    points: FloatArray,
    omega: FloatArray,
    phase: FloatArray,
    weights: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Add ``points`` to the finite fit's statistics; ``O(k d m^2)`` for ``k`` points.

    The statistics are the weighted sums

    - ``S = lam_0 I + sum_i w_i sum_l phidot_l(x_i) phidot_l(x_i)^T`` (kept as its upper
      Cholesky factor ``R``, ``S = R^T R``),
    - ``b = sum_i w_i phi(x_i) * (sum_l Omega_l^2)``,

    with ``phidot_l(x) = -sqrt(2/m) sin(Omega^T x + u) * Omega_l``, the derivative of the
    features along coordinate ``l``. With total weight ``W``, ``S / W = C + (lam_0 / W) I``
    and ``b / W`` are the paper's (weighted) averages, so ``theta = S^-1 b`` is its
    ``(C + lam I)^-1 b`` with a ridge that fades as ``1/W`` (the reference code's "fake
    observation") but never below ``lam_0`` in ``S``: ``S``'s smallest eigenvalue is at
    least ``lam_0`` whatever the data.

    ``R`` is updated without forming ``S``: the upper-triangular QR factor of
    ``[R; Phidot]`` (the ``k d`` derivative rows stacked below ``R``) is the Cholesky
    factor of ``S + Phidot^T Phidot`` (Householder reflections, signs fixed so the diagonal
    is positive, as in the Cholesky factor).

    Parameters
    ----------
    factor, b
        The current ``R`` (upper triangular, ``(m, m)``) and ``b`` (``(m,)``); not
        modified.
    points
        Shape ``(k, d)`` or ``(d,)``.
    omega, phase
        The features (:func:`random_features`).
    weights
        Non-negative weights ``w_i``, shape ``(k,)``; default all 1.

    Returns
    -------
    factor, b
        New arrays.

    Raises
    ------
    FloatingPointError
        If the new factor is not finite.
    """
    arg = _feature_argument(points, omega, phase)
    k, m = arg.shape
    d = omega.shape[0]
    scale = math.sqrt(2.0 / m)
    cosine, sine = scale * cos(arg), scale * sin(arg)
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    # Row (i, l) of the stacked, weighted derivatives: -sqrt(w_i) sin(x_i) * Omega_l.
    phidot = -((np.sqrt(w)[:, None] * sine)[:, None, :] * omega[None, :, :]).reshape(k * d, m)
    with np.errstate(all="ignore"):  # absurd points: a non-finite factor, refused below
        new_factor = _qr_update(factor, phidot)
    new_factor *= np.copysign(1.0, np.diag(new_factor))[:, None]
    if not np.all(np.isfinite(new_factor)):
        raise FloatingPointError("finite score-matching factor is not finite")
    squared_norms = np.add.reduce(np.ascontiguousarray((omega * omega).T), axis=-1)
    new_b = b + vecmat(w, cosine) * squared_norms
    return new_factor, new_b


def _qr_update(R: FloatArray, P: FloatArray) -> FloatArray:
    """The upper triangular factor of the QR factorisation of ``[R; P]``, ``R`` upper
    triangular ``(m, m)``, ``P`` of shape ``(r, m)``: one Householder reflection per
    column, which zeroes that column of ``P`` into the diagonal of ``R`` (LAPACK's
    ``dtpqrt`` with ``l = 0``, in :mod:`core.numerics.arithmetic`'s reproducible operations).
    ``O(r m^2)``; ``R`` and ``P`` are not modified. The diagonal may come out negative.
    """
    R = np.array(R, dtype=np.float64)
    P = np.array(P, dtype=np.float64)
    m = R.shape[0]
    for j in range(m):
        x = P[:, j]
        sigma = dot(x, x)
        if sigma == 0.0:
            continue
        alpha = float(R[j, j])
        beta = -math.copysign(math.sqrt(alpha * alpha + sigma), alpha)
        tau = (beta - alpha) / beta
        v = x / (alpha - beta)  # the reflector (1; v)
        if j + 1 < m:
            rest = P[:, j + 1 :]
            w = R[j, j + 1 :] + vecmat(v, rest)
            w *= tau
            R[j, j + 1 :] -= w
            rest -= np.multiply.outer(v, w)
        R[j, j] = beta
        P[:, j] = 0.0
    return R


def finite_solve(factor: FloatArray, b: FloatArray) -> FloatArray:
    """``theta = S^-1 b`` from the Cholesky factor ``R`` of ``S``; ``O(m^2)``."""
    return solve_upper(factor, solve_lower(np.ascontiguousarray(factor.T), b))


@dataclass(frozen=True, slots=True)
class FiniteSurrogate:
    """The finite surrogate ``f(x) = theta^T phi(x)``.

    Attributes
    ----------
    omega, phase
        The features (:func:`random_features`), shapes ``(d, m)`` and ``(m,)``.
    theta
        The weights (:func:`finite_solve`), shape ``(m,)``.
    """

    omega: FloatArray
    phase: FloatArray
    theta: FloatArray

    def logdensity(self, x: FloatArray) -> float:
        """``f(x)``, up to the unknown normalising constant; ``O(d m)``."""
        arg = _feature_argument(x, self.omega, self.phase)[0]
        return math.sqrt(2.0 / arg.size) * dot(cos(arg), self.theta)

    def gradient(self, x: FloatArray) -> FloatArray:
        """``grad f(x) = -sqrt(2/m) Omega (sin(Omega^T x + u) * theta)``; ``O(d m)``."""
        arg = _feature_argument(x, self.omega, self.phase)[0]
        grad: FloatArray = matvec(self.omega, sin(arg) * self.theta)
        grad *= -math.sqrt(2.0 / arg.size)
        return grad
