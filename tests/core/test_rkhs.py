"""Gaussian kernel pieces: values, gradients, median heuristic."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kameleon.core.kernels.rkhs import gaussian_kernel, gaussian_kernel_grad, median_bandwidth


def test_gaussian_kernel_matches_the_formula() -> None:
    rng = np.random.default_rng(0)
    X, Y, bandwidth = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), 1.7
    K = gaussian_kernel(X, Y, bandwidth)
    expected = [[math.exp(-float(np.sum((x - y) ** 2)) / (2 * bandwidth**2)) for y in Y] for x in X]
    np.testing.assert_allclose(K, expected, rtol=1e-13)
    np.testing.assert_allclose(np.diag(gaussian_kernel(X, X, bandwidth)), 1.0)


def test_kernel_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    x, Z, bandwidth = rng.standard_normal(4), rng.standard_normal((6, 4)), 1.3
    grad = gaussian_kernel_grad(x, Z, bandwidth)
    assert grad.shape == (6, 4)
    h = 1e-6
    numeric = np.empty_like(grad)
    for j in range(4):
        e = np.zeros(4)
        e[j] = h
        plus = gaussian_kernel(x + e, Z, bandwidth)[0]
        minus = gaussian_kernel(x - e, Z, bandwidth)[0]
        numeric[:, j] = (plus - minus) / (2 * h)
    # Central differences have error O(h^2) ~ 1e-12 plus rounding ~ 1e-16 / h ~ 1e-10.
    np.testing.assert_allclose(grad, numeric, atol=1e-8)


def test_kernel_gradient_does_not_mutate_its_inputs() -> None:
    x, Z = np.zeros(2), np.ones((3, 2))
    gaussian_kernel_grad(x, Z, 1.0)
    np.testing.assert_array_equal(Z, 1.0)
    np.testing.assert_array_equal(x, 0.0)


def test_median_bandwidth_matches_a_direct_computation() -> None:
    rng = np.random.default_rng(2)
    points = rng.standard_normal((30, 3))
    distances = [float(np.linalg.norm(a - b)) for a, b in itertools.combinations(points, 2)]
    expected = float(np.median(distances)) / math.sqrt(2)
    assert median_bandwidth(points) == pytest.approx(expected, rel=1e-12)


def test_median_bandwidth_leaves_out_pairs_of_identical_points() -> None:
    rng = np.random.default_rng(3)
    points = np.vstack([rng.standard_normal((10, 2)), np.zeros((30, 2))])
    distances = [float(np.linalg.norm(a - b)) for a, b in itertools.combinations(points, 2)]
    expected = float(np.median([r for r in distances if r > 0])) / math.sqrt(2)
    # 435 of the 780 pairs are (0, 0): counting them would make the median 0.
    assert median_bandwidth(points) == pytest.approx(expected, rel=1e-12)


def test_median_bandwidth_subsamples_rows_with_the_rng() -> None:
    points = np.random.default_rng(4).standard_normal((50, 2))
    chosen = np.random.default_rng(5).choice(50, size=20, replace=False)
    expected = median_bandwidth(points[chosen])
    got = median_bandwidth(points, np.random.default_rng(5), max_points=20)
    assert got == pytest.approx(expected, rel=1e-12)
    assert median_bandwidth(points, max_points=20) == pytest.approx(median_bandwidth(points[:20]))


@pytest.mark.parametrize("points", [np.ones((5, 2)), np.zeros((1, 3))])
def test_median_bandwidth_needs_two_distinct_points(points: np.ndarray) -> None:
    with pytest.raises(ValueError, match="distinct"):
        median_bandwidth(points)
