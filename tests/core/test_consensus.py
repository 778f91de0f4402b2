"""Consensus Monte Carlo's two rules (core.populations.consensus): exact on Gaussian subposteriors,
clear errors on shards that cannot be combined, and the shape check that says when a
shard is not Gaussian."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kameleon.core.populations.consensus import (
    ConsensusError,
    combine,
    gaussian_product,
    shape_departures,
    weighted_average,
)


def _gaussian_shards(
    rng: np.random.Generator, j: int, dim: int, n: int
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """``j`` exact samples of Gaussian subposteriors with random means and correlated
    covariances, and their product's mean and covariance."""
    shards, precisions, shifts = [], [], []
    for _ in range(j):
        a = rng.standard_normal((dim, dim))
        cov = a @ a.T / dim + 0.5 * np.eye(dim)
        mean = rng.normal(0, 2, dim)
        shards.append(rng.multivariate_normal(mean, cov, size=n))
        precision = np.linalg.inv(cov)
        precisions.append(precision)
        shifts.append(precision @ mean)
    covariance = np.linalg.inv(sum(precisions))
    return shards, covariance @ sum(shifts), covariance


@pytest.mark.parametrize("method", ["weighted", "gaussian"])
def test_gaussian_subposteriors_combine_to_their_product(method: str) -> None:
    # Exact for Gaussians. Tolerance: with 20 000 draws per shard the shards' sample
    # means and covariances are off by about 1/sqrt(20 000) = 0.7 % of a standard
    # deviation or a variance; 5 % and 0.05 sd leave a margin of several standard
    # errors, at a fixed seed.
    rng = np.random.default_rng(1)
    shards, mean, cov = _gaussian_shards(rng, 4, 3, 20_000)
    out = combine(shards, method, seed=2)
    sd = np.sqrt(np.diag(cov))
    assert out.draws.shape == (20_000, 3)
    assert np.all(np.abs(out.mean - mean) < 0.05 * sd)
    assert np.all(np.abs(out.draws.mean(axis=0) - mean) < 0.05 * sd)
    assert np.allclose(out.covariance, cov, rtol=0.05, atol=0.05 * sd.max() ** 2)
    assert np.allclose(np.cov(out.draws, rowvar=False), cov, rtol=0.05, atol=0.05 * sd.max() ** 2)


def test_the_weighted_average_is_exact_draw_by_draw_for_gaussians() -> None:
    # Averaging the t-th draws with weights W_s = S_s^-1 gives a draw whose covariance is
    # (sum S_s^-1)^-1 whatever the pairing: check the rule itself, against the formula.
    rng = np.random.default_rng(3)
    shards, _, _ = _gaussian_shards(rng, 3, 2, 500)
    out = weighted_average(shards)
    weights = [np.linalg.inv(np.cov(s, rowvar=False)) for s in shards]
    expected = np.linalg.solve(
        sum(weights), sum(w @ s[7] for w, s in zip(weights, shards, strict=True))
    )
    assert np.allclose(out.draws[7], expected, rtol=1e-10, atol=1e-12)


def test_shards_of_different_lengths_use_the_fewest_draws_spread_over_each() -> None:
    rng = np.random.default_rng(4)
    shards = [rng.standard_normal((n, 2)) for n in (300, 1000, 450)]
    assert weighted_average(shards).draws.shape == (300, 2)
    assert gaussian_product(shards, 123, np.random.default_rng(0)).draws.shape == (123, 2)
    assert combine(shards, "gaussian").draws.shape == (300, 2)


def test_the_gaussian_draws_are_reproducible_from_the_seed() -> None:
    rng = np.random.default_rng(5)
    shards = [rng.standard_normal((200, 2)) for _ in range(2)]
    a, b = combine(shards, "gaussian", seed=9), combine(shards, "gaussian", seed=9)
    assert a.draws.tobytes() == b.draws.tobytes()
    assert combine(shards, "gaussian", seed=10).draws.tobytes() != a.draws.tobytes()


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ([np.zeros((10, 2))], "at least 2 shards"),
        ([np.ones((10, 2)), np.ones((10, 3))], "dimension 3"),
        ([np.ones((10, 2)), np.ones((3, 2))], "at least dim + 2"),
        ([np.ones(10), np.ones(10)], "(draws, dim)"),
        ([np.full((10, 2), np.nan), np.ones((10, 2))], "finite"),
        ([np.ones((10, 2)), np.ones((10, 2))], "singular"),
    ],
)
def test_shards_that_cannot_be_combined_are_refused(shards: list[np.ndarray], message: str) -> None:
    for method in ("weighted", "gaussian"):
        with pytest.raises(ConsensusError, match=re.escape(message)):
            combine(shards, method)


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ConsensusError, match="'weighted', 'gaussian'"):
        combine([np.eye(3), np.eye(3)], "median")


def test_a_skewed_or_heavy_tailed_shard_is_named() -> None:
    # Gaussian draws pass (|skewness| about 0.02 and |excess kurtosis| about 0.05 at
    # 10 000 draws, far below 0.5 and 1); an exponential coordinate (skewness 2,
    # excess kurtosis 6) and a Student-t with 5 degrees of freedom (excess kurtosis 6)
    # are named.
    rng = np.random.default_rng(6)
    gaussian = rng.standard_normal((10_000, 3))
    assert shape_departures(gaussian) == []
    skewed = gaussian.copy()
    skewed[:, 1] = rng.exponential(size=10_000)
    skewed[:, 2] = rng.standard_t(5, size=10_000)
    named = shape_departures(skewed)
    assert [k for k, _, _ in named] == [1, 2]
    assert named[0][1] > 1.5
    assert named[1][2] > 2
