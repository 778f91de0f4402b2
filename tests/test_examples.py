"""The examples run, and the pseudo-marginal one's estimator is what it claims to be."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit, logsumexp, roots_hermitenorm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from glass_gpc import RIDGE, GlassGPC, load_glass  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_glass_data_are_the_papers() -> None:
    x, y = load_glass()
    assert x.shape == (214, 9)
    assert (y == 1).sum() == 163 and (y == -1).sum() == 51  # window glass against the rest
    # Centred and whitened.
    assert np.allclose(x.mean(axis=0), 0, atol=1e-12)
    assert np.allclose(np.cov(x, rowvar=False), np.eye(9), atol=1e-10)


def test_the_marginal_likelihood_estimate_is_unbiased_and_quiet() -> None:
    """An unbiased estimate of p(y | theta) averages, over repeats, to the estimate with
    many more samples; and its log has a small spread, the regime in which a
    pseudo-marginal chain mixes well (an sd under about 1).

    Tolerance: 40 estimates of 100 samples are 4000 samples in all, so their average and
    the single 4000-sample estimate differ only by the estimators' noise, whose relative
    sd is about sd(log estimate) / sqrt(40) < 0.03 here; 0.1 in the log is over 3 sd.
    """
    target = GlassGPC(seed=7)
    rng = np.random.default_rng(3)
    for theta in (np.zeros(9), np.linspace(-1.0, 1.0, 9)):
        small = np.array([target.log_marginal_estimate(theta, rng) for _ in range(40)])
        big = GlassGPC(seed=8, samples=4000).log_marginal_estimate(theta, rng)
        assert small.std() < 0.5, small.std()
        assert abs(float(logsumexp(small)) - math.log(40) - big) < 0.1


def test_the_marginal_likelihood_estimator_is_unbiased_against_quadrature() -> None:
    """On three points, ``p(y | theta) = E[prod_i sigma(y_i f_i)]``, ``f ~ N(0, K + r I)``,
    is a three-dimensional Gaussian integral: tensor Gauss-Hermite quadrature with 60
    nodes per axis gives it to about 1e-12. The mean of M = 2000 estimates (100
    importance samples each) must match it within 4 standard errors (z about 0.6 with
    this seed). The classic mistake, exponentiating the mean of the log weights instead
    of taking the mean of the weights, is biased low by Jensen's inequality (about
    sd(log w)^2 / 2 = 8e-4 relative, with sd(log w) = 0.04 here) and must fail the same
    test (z about -9)."""
    x, y = np.array([[-1.0], [0.3], [1.2]]), np.array([1.0, -1.0, 1.0])
    target = GlassGPC(seed=1, samples=100, data=(x, y))
    theta = np.zeros(1)
    chol = np.linalg.cholesky(target.kernel(theta) + RIDGE * np.eye(3))
    nodes, weights = roots_hermitenorm(60)
    weights = weights / weights.sum()
    grid = np.stack(np.meshgrid(nodes, nodes, nodes, indexing="ij"), -1).reshape(-1, 3)
    mass = np.einsum("i,j,k->ijk", weights, weights, weights).ravel()
    truth = float(mass @ np.prod(expit(y * (grid @ chol.T)), axis=1))

    rng = np.random.default_rng(2)
    log_w = np.array([target.log_weights(theta, rng) for _ in range(2000)])

    def z(estimates: np.ndarray) -> float:
        return float((estimates.mean() - truth) / (estimates.std() / math.sqrt(estimates.size)))

    unbiased = np.exp(logsumexp(log_w, axis=1) - math.log(100))
    # The estimate the sampler is told is the log of exactly this mean of weights.
    again = target.log_weights(theta, np.random.default_rng(5))
    told = target.log_marginal_estimate(theta, np.random.default_rng(5))
    assert told == float(logsumexp(again) - math.log(100))
    assert abs(z(unbiased)) < 4, z(unbiased)
    biased = np.exp(log_w.mean(axis=1))
    assert z(biased) < -4, z(biased)


def test_the_example_samples_in_process() -> None:
    import kameleon

    target = GlassGPC(seed=1)
    # 30 draws of two chains: too few to agree, and the run says so.
    with pytest.warns(kameleon.SamplingWarning) as caught:
        result = kameleon.sample(
            target,
            dim=9,
            algorithm="kameleon",
            chains=2,
            iterations=30,
            warmup=15,
            seed=1,
            pseudo_marginal=True,
            initial=np.zeros(9),
            progress=False,
        )
    # It says so: the chains disagree (rhat) or, still climbing after 15 warm-up
    # iterations, drift (the drift warning, which also names a too-short warm-up).
    codes = {w.message.finding.code for w in caught}  # type: ignore[union-attr]
    assert codes & {"rhat", "improper"}, codes
    assert result.draws.shape == (2, 30, 9)  # iterations after the warm-up
    assert np.all(np.isfinite(result.draws))


def test_the_example_prints_a_table_and_each_kind_of_warning_once() -> None:
    import subprocess

    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "glass_gpc.py"), "--chains", "2",
         "--iterations", "20", "--warmup", "10"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert any(line.startswith("parameter") and "r_hat" in line for line in lines)
    assert sum(line.startswith("theta_") for line in lines) == 9
    kinds = [line.split("]")[0] for line in lines if line.startswith("warning [")]
    assert kinds and len(kinds) == len(set(kinds))
    assert "SamplingWarning" not in run.stderr


def test_the_example_runs_blas_on_one_thread() -> None:
    """The README's figure of tens of milliseconds an evaluation holds because the
    example limits BLAS to one thread (OpenBLAS's default, a thread per core, was 50
    times slower on two cores)."""
    text = (ROOT / "examples" / "glass_gpc.py").read_text()
    assert 'threadpool_limits(limits=1, user_api="blas")' in text
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Example: pseudo-marginal GP") :]
    assert "one BLAS thread" in section[: section.index("## Clients")]
