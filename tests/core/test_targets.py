"""The benchmark targets: densities, exact samplers, moments and quantile metrics."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import integrate, stats

from kameleon.core.validation.targets import (
    QUANTILE_LEVELS,
    Banana,
    Flower,
    Gaussian,
    PseudoMarginal,
    quantile_error,
)

N_EXACT = 200_000


def _assert_mean_within(values: np.ndarray, truth: np.ndarray, n_se: float = 5.0) -> None:
    """``values`` (independent rows) average to ``truth`` within ``n_se`` standard errors."""
    mean = values.mean(axis=0)
    se = values.std(axis=0, ddof=1) / math.sqrt(len(values))
    np.testing.assert_array_less(np.abs(mean - truth), n_se * se)


def _assert_coverage_exact(coverage: np.ndarray, n: int) -> None:
    # Each p_q is a binomial proportion of n independent draws: standard error
    # sqrt(q (1 - q) / n); 5 standard errors.
    se = np.sqrt(QUANTILE_LEVELS * (1 - QUANTILE_LEVELS) / n)
    np.testing.assert_array_less(np.abs(coverage - QUANTILE_LEVELS), 5 * se)


# --------------------------------------------------------------------------- Gaussian


def test_gaussian_logdensity_matches_scipy() -> None:
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.array([[2.0, 0.6, 0.1], [0.6, 1.0, -0.3], [0.1, -0.3, 0.5]])
    target = Gaussian(mean, cov)
    points = np.random.default_rng(0).normal(size=(7, 3)) * 2
    expected = stats.multivariate_normal(mean, cov).logpdf(points)
    np.testing.assert_allclose(target.logdensity_rows(points), expected, rtol=1e-12)
    assert target.logdensity(points[0]) == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_array_equal(target.variance, np.diag(cov))


def test_gaussian_rejects_a_covariance_that_is_not_positive_definite() -> None:
    with pytest.raises(ValueError, match="positive definite"):
        Gaussian([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]])


def test_gaussian_samples_and_quantiles() -> None:
    target = Gaussian([1.0, -1.0], [[1.0, 0.9], [0.9, 4.0]])
    draws = target.sample(N_EXACT, np.random.default_rng(1))
    _assert_mean_within(draws, target.mean)
    _assert_mean_within((draws - target.mean) ** 2, target.variance)
    _assert_coverage_exact(target.quantile_coverage(draws), N_EXACT)


# --------------------------------------------------------------------------- banana


@pytest.mark.parametrize(("b", "v"), [(0.03, 100.0), (0.1, 100.0), (0.5, 2.0)])
def test_banana_is_normalised_in_2d(b: float, v: float) -> None:
    target = Banana(2, b=b, v=v)
    half_width = 12 * math.sqrt(v)  # the y1 marginal is N(0, v); 12 sd leave nothing out

    def density(y2: float, y1: float) -> float:
        return math.exp(target.logdensity([y1, y2]))

    # Integrate y2 around the ridge b (y1^2 - v), where the N(., 1) conditional lives.
    total, error = integrate.dblquad(
        density,
        -half_width,
        half_width,
        lambda y1: b * (y1**2 - v) - 12,
        lambda y1: b * (y1**2 - v) + 12,
        epsabs=1e-10,
    )
    assert error < 1e-8
    assert total == pytest.approx(1.0, abs=1e-6)


def test_banana_logdensity_is_the_transformed_gaussian() -> None:
    target = Banana(4, b=0.1, v=10.0)
    y = np.random.default_rng(2).normal(size=(5, 4)) * 3
    u2 = y[:, 1] - 0.1 * (y[:, 0] ** 2 - 10.0)
    expected = (
        stats.norm(0, math.sqrt(10.0)).logpdf(y[:, 0])
        + stats.norm.logpdf(u2)
        + stats.norm.logpdf(y[:, 2:]).sum(axis=1)
    )
    np.testing.assert_allclose(target.logdensity_rows(y), expected, rtol=1e-12)


def test_banana_sampler_has_the_stated_moments() -> None:
    target = Banana(3, b=0.03, v=100.0)
    np.testing.assert_array_equal(target.variance, [100.0, 19.0, 1.0])
    draws = target.sample(N_EXACT, np.random.default_rng(3))
    _assert_mean_within(draws, target.mean)
    _assert_mean_within(draws**2, target.variance)
    # The twist makes y1^2 and y2 dependent: Cov(y1^2, y2) = b Var(y1^2) = 2 b v^2 = 600.
    _assert_mean_within(((draws[:, 0] ** 2 - 100.0) * draws[:, 1])[:, None], np.array([600.0]))


def test_banana_sampler_agrees_with_the_log_density() -> None:
    # Under exact draws the standardised coordinates are independent N(0, 1): a KS test
    # per coordinate with a fixed seed (p-values from a correct sampler are uniform; the
    # 1e-3 threshold is far from what a wrong transform gives, p ~ 0).
    target = Banana(3, b=0.1, v=100.0)
    u = target.standardise(target.sample(20_000, np.random.default_rng(4)))
    for k in range(3):
        assert stats.kstest(u[:, k], "norm").pvalue > 1e-3


def test_banana_quantile_metric_is_zero_on_exact_draws_and_not_on_wrong_ones() -> None:
    target = Banana(8, b=0.03, v=100.0)
    draws = target.sample(N_EXACT, np.random.default_rng(5))
    coverage = target.quantile_coverage(draws)
    _assert_coverage_exact(coverage, N_EXACT)
    assert quantile_error(coverage) < 0.005
    # Draws with the right means and variances but no twist are far off.
    untwisted = draws.copy()
    untwisted[:, 1] = np.random.default_rng(6).normal(0, math.sqrt(19.0), N_EXACT)
    assert quantile_error(target.quantile_coverage(untwisted)) > 0.05


# --------------------------------------------------------------------------- flower


def test_flower_logdensity_formula() -> None:
    target = Flower(3, radius=10.0, amplitude=6.0, frequency=6.0, sigma=2.0)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 3)) * 8
    r = np.hypot(x[:, 0], x[:, 1])
    theta = np.arctan2(x[:, 1], x[:, 0])
    expected = -((r - 10.0 - 6.0 * np.cos(6.0 * theta)) ** 2) / (2 * 4.0) - 0.5 * x[:, 2] ** 2
    np.testing.assert_allclose(target.logdensity_rows(x), expected, rtol=1e-12)
    # The petal tip at angle 0 has r = r0 + A: the log density is that of x_3 alone. (With
    # r the norm of all of x, as in the reference code, x_3 would move it off the ridge.)
    assert target.logdensity([16.0, 0.0, 3.0]) == pytest.approx(-4.5)


def test_flower_has_the_rotational_symmetry_that_makes_its_mean_zero() -> None:
    target = Flower(2)
    x = np.random.default_rng(8).normal(size=(5, 2)) * 10
    angle = 2 * math.pi / 6
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    np.testing.assert_allclose(
        target.logdensity_rows(x @ rotation.T), target.logdensity_rows(x), atol=1e-9
    )
    assert target.mean is not None and np.all(target.mean == 0)
    assert Flower(2, frequency=1.0).mean is None  # one petal: no symmetry, mean unknown
    assert Flower(2, amplitude=0.0, frequency=1.0).mean is not None  # a ring


def test_flower_quantile_metric_is_approximately_right_for_a_thin_ring() -> None:
    # The metric ignores the polar Jacobian r, whose effect on (r - r0) is of the order of
    # sigma / r0; for a thin ring, draws with a uniform angle and a N(r0, sigma^2) radius are
    # nearly exact, and the coverage is within that order of q.
    target = Flower(3, radius=10.0, amplitude=0.0, sigma=0.1)
    rng = np.random.default_rng(9)
    n = 50_000
    angle = rng.uniform(0, 2 * math.pi, n)
    radius = 10.0 + 0.1 * rng.standard_normal(n)
    x = np.column_stack([radius * np.cos(angle), radius * np.sin(angle), rng.standard_normal(n)])
    assert quantile_error(target.quantile_coverage(x)) < 0.02


# --------------------------------------------------------------------------- pseudo-marginal


def test_pseudo_marginal_estimate_is_unbiased_with_the_stated_noise() -> None:
    target = Gaussian([0.0], [[1.0]])
    noisy = PseudoMarginal(target, noise_sd=1.0)
    rng = np.random.default_rng(10)
    x = np.array([0.3])
    log_w = np.array([noisy.logdensity(x, rng) - target.logdensity(x) for _ in range(20_000)])
    # log W ~ N(-1/2, 1): its mean and sd, and E[W] = 1 (W has a finite variance e - 1).
    _assert_mean_within(log_w[:, None], np.array([-0.5]))
    _assert_mean_within(((log_w + 0.5) ** 2)[:, None], np.array([1.0]))
    _assert_mean_within(np.exp(log_w)[:, None], np.array([1.0]))
    assert noisy.dim == 1


def test_pseudo_marginal_keeps_the_support() -> None:
    class HalfLine:
        dim = 1

        def logdensity(self, x: npt.ArrayLike) -> float:
            return 0.0 if np.asarray(x)[0] > 0 else -math.inf

    noisy = PseudoMarginal(HalfLine(), noise_sd=1.0)
    assert noisy.logdensity(np.array([-1.0]), np.random.default_rng(11)) == -math.inf
