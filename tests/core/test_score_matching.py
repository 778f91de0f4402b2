"""Tests of the score-matching estimators of kernel HMC (core.kernels.score_matching)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import linalg, stats

from kameleon.core.interface.chain import FloatArray
from kameleon.core.kernels import kernel_hmc
from kameleon.core.kernels.score_matching import (
    FiniteSurrogate,
    LiteSurrogate,
    finite_initial,
    finite_regularizer,
    finite_solve,
    finite_update,
    fit_lite,
    lite_objective,
    lite_statistics,
    random_features,
)
from kameleon.core.samplers import kmc_finite, kmc_lite


def correlated_gaussian(dim: int, seed: int) -> tuple[np.random.Generator, FloatArray]:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((dim, dim))
    cov: FloatArray = A @ A.T / dim + 0.3 * np.eye(dim)
    return rng, cov


def typical_points(rng: np.random.Generator, cov: FloatArray, n: int) -> FloatArray:
    """Draws of N(0, cov) between its 10% and 60% density quantiles: where the chain spends
    its time, without the mode itself, where the true gradient vanishes and has no
    direction to compare."""
    dim = cov.shape[0]
    x = rng.multivariate_normal(np.zeros(dim), cov, n)
    m2 = np.einsum("ij,jk,ik->i", x, np.linalg.inv(cov), x)
    keep = (m2 > stats.chi2(dim).ppf(0.1)) & (m2 < stats.chi2(dim).ppf(0.6))
    points: FloatArray = x[keep]
    return points


def mean_cosine(a: FloatArray, b: FloatArray) -> float:
    return float(np.mean(np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)))


def fd_gradient(f: Callable[[FloatArray], float], x: FloatArray, h: float = 1e-5) -> FloatArray:
    e = np.eye(x.size) * h
    return np.array([(f(x + e[i]) - f(x - e[i])) / (2 * h) for i in range(x.size)])


def fd_laplacian(f: Callable[[FloatArray], float], x: FloatArray, h: float = 1e-4) -> float:
    e = np.eye(x.size) * h
    return sum((f(x + e[i]) - 2 * f(x) + f(x - e[i])) / h**2 for i in range(x.size))


# --------------------------------------------------------------------------- lite


def test_lite_statistics_are_the_papers_coordinate_sums() -> None:
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((7, 3)) + 5.0  # away from the origin: the sums must not care
    bandwidth = 1.3
    sigma = 2 * bandwidth**2
    K, b, C = lite_statistics(Z, bandwidth)
    ones = np.ones(len(Z))
    b_paper = np.zeros(len(Z))
    C_paper = np.zeros((len(Z), len(Z)))
    for x in Z.T:
        s, D = x * x, np.diag(x)
        b_paper += (2 / sigma) * (K @ s + np.diag(s) @ K @ ones - 2 * D @ K @ x) - K @ ones
        C_paper += (D @ K - K @ D) @ (K @ D - D @ K)
    np.testing.assert_allclose(b, b_paper, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(C, C_paper, rtol=1e-10, atol=1e-10)


def test_lite_objective_matches_direct_score_matching_objective() -> None:
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((6, 2))
    alpha = rng.standard_normal(6)
    bandwidth = 0.9
    _, b, C = lite_statistics(Z, bandwidth)
    surrogate = LiteSurrogate(Z, alpha, bandwidth)
    # J = (1/n) sum_i [laplacian f(z_i) + |grad f(z_i)|^2 / 2], by finite differences.
    direct = np.mean(
        [
            fd_laplacian(surrogate.logdensity, z)
            + 0.5 * np.sum(fd_gradient(surrogate.logdensity, z) ** 2)
            for z in Z
        ]
    )
    # Central differences of f = O(1) have errors ~1e-6 here (h^2 terms and rounding).
    assert lite_objective(alpha, b, C, bandwidth) == pytest.approx(direct, rel=1e-5, abs=1e-5)


def test_fit_lite_minimises_the_regularised_objective() -> None:
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((20, 3))
    bandwidth, regularization = 1.5, 0.05
    K, b, C = lite_statistics(Z, bandwidth)
    n, sigma = len(Z), 2 * bandwidth**2
    lam = regularization * float(np.trace(C)) / n
    A = C + lam * (K + np.eye(n))

    def objective(a: FloatArray) -> float:
        penalty = float(a @ (K + np.eye(n)) @ a)
        return lite_objective(a, b, C, bandwidth) + 2 / (n * sigma**2) * lam * penalty

    alpha = fit_lite(Z, bandwidth, regularization)
    gradient = 2 / (n * sigma) * b + 4 / (n * sigma**2) * A @ alpha
    assert np.linalg.norm(gradient) < 1e-10 * np.linalg.norm(2 / (n * sigma) * b)
    for _ in range(5):  # a strictly convex quadratic: every other point is worse
        assert objective(alpha + 1e-3 * rng.standard_normal(n)) > objective(alpha)


# --------------------------------------------------------------------------- finite


def batch_statistics(
    points: FloatArray, weights: FloatArray, omega: FloatArray, phase: FloatArray, lam0: float
) -> tuple[FloatArray, FloatArray]:
    """S and b of finite_update, summed point by point from the formulas."""
    m = omega.shape[1]
    S = lam0 * np.eye(m)
    b = np.zeros(m)
    for x, w in zip(points, weights, strict=True):
        arg = omega.T @ x + phase
        for ell in range(omega.shape[0]):
            phidot = -math.sqrt(2 / m) * np.sin(arg) * omega[ell]
            S += w * np.outer(phidot, phidot)
            b += w * math.sqrt(2 / m) * np.cos(arg) * omega[ell] ** 2
    return S, b


def test_finite_online_updates_match_the_batch_statistics() -> None:
    rng = np.random.default_rng(3)
    dim, m, regularization = 3, 12, 2.0
    omega, phase = random_features(rng, dim, m, bandwidth=0.8)
    points = rng.standard_normal((9, dim))
    weights = rng.uniform(0.5, 3.0, 9)
    factor, b = finite_initial(omega, regularization)
    for x, w in zip(points, weights, strict=True):
        factor, b = finite_update(factor, b, x, omega, phase, np.array([w]))
    S, b_batch = batch_statistics(
        points, weights, omega, phase, finite_regularizer(omega, regularization)
    )
    np.testing.assert_allclose(factor, linalg.cholesky(S), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b, b_batch, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(finite_solve(factor, b), np.linalg.solve(S, b_batch), rtol=1e-8)
    # Folding them in as one batch gives the same statistics.
    one_batch = finite_update(*finite_initial(omega, regularization), points, omega, phase, weights)
    np.testing.assert_allclose(one_batch[0], factor, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(one_batch[1], b, rtol=1e-10, atol=1e-12)


def test_finite_regulariser_is_a_floor_with_fewer_data_than_features() -> None:
    rng = np.random.default_rng(4)
    omega, phase = random_features(rng, 2, 50, bandwidth=1.0)
    lam0 = finite_regularizer(omega, 1.0)
    factor, _ = finite_update(
        *finite_initial(omega, 1.0), rng.standard_normal((3, 2)), omega, phase
    )
    # 3 points, 2 dimensions: rank 6 out of 50; the other eigenvalues are lam0 exactly.
    eigenvalues = np.linalg.eigvalsh(factor.T @ factor)
    assert eigenvalues.min() == pytest.approx(lam0, rel=1e-8)
    assert np.all(np.diag(factor) > 0)


def test_finite_update_rejects_a_non_finite_factor() -> None:
    rng = np.random.default_rng(5)
    omega, phase = random_features(rng, 2, 10, bandwidth=1.0)
    with pytest.raises(FloatingPointError):
        finite_update(*finite_initial(omega, 1.0), np.array([np.nan, 0.0]), omega, phase)


# --------------------------------------------------------------------------- both

Fit = Callable[[FloatArray, float, np.random.Generator], "LiteSurrogate | FiniteSurrogate"]


def lite_fit(X: FloatArray, bandwidth: float, rng: np.random.Generator) -> LiteSurrogate:
    params = kmc_lite.make_params(X.shape[1], {}, warmup=0)
    return LiteSurrogate(X, fit_lite(X, bandwidth, params.regularization), bandwidth)


def finite_fit(X: FloatArray, bandwidth: float, rng: np.random.Generator) -> FiniteSurrogate:
    params = kmc_finite.make_params(X.shape[1], {}, warmup=0)
    omega, phase = random_features(rng, X.shape[1], params.num_features, bandwidth)
    statistics = finite_update(*finite_initial(omega, params.regularization), X, omega, phase)
    return FiniteSurrogate(omega, phase, finite_solve(*statistics))


@pytest.mark.parametrize("fit", [lite_fit, finite_fit], ids=["lite", "finite"])
@pytest.mark.parametrize("dim", [2, 5])
def test_surrogate_gradient_points_along_the_true_gradient(fit: Fit, dim: int) -> None:
    rng, cov = correlated_gaussian(dim, seed=dim)
    X = rng.multivariate_normal(np.zeros(dim), cov, 250)  # the default number of centres
    bandwidth = kernel_hmc.default_bandwidth(X, rng)
    assert bandwidth is not None
    surrogate = fit(X, bandwidth, rng)
    T = typical_points(rng, cov, 400)
    estimated = np.array([surrogate.gradient(t) for t in T])
    true = -T @ np.linalg.inv(cov)
    # Deterministic (fixed seeds). Over five seeds the mean cosine was 0.94 to 0.99
    # (2-d) and 0.96 to 0.99 (5-d) for both estimators; 0.9 leaves room for numerics.
    assert mean_cosine(estimated, true) > 0.9


@pytest.mark.parametrize("fit", [lite_fit, finite_fit], ids=["lite", "finite"])
def test_surrogate_gradient_is_the_gradient_of_its_logdensity(fit: Fit) -> None:
    rng, cov = correlated_gaussian(3, seed=6)
    X = rng.multivariate_normal(np.zeros(3), cov, 40)
    surrogate = fit(X, 1.2, rng)
    for x in rng.standard_normal((3, 3)):
        np.testing.assert_allclose(
            surrogate.gradient(x), fd_gradient(surrogate.logdensity, x), rtol=1e-6, atol=1e-6
        )
