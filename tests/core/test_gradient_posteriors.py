"""The gradient samplers on the posteriors the lecture notes teach them on: a Bayesian
logistic regression against an independent reference, a 100-dimensional correlated
Gaussian, and Neal's funnel, where they must say that they cannot follow it."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
import pytest
from scipy import optimize, special, stats

from kameleon.core.diagnostics.findings import SamplingWarning
from kameleon.core.diagnostics.summary import ess_bulk, mcse_mean, per_parameter
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.validation.cases import cases

# --------------------------------------------------------------------------- logistic


def _logistic_data(n: int = 200, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A design with an intercept and four standardised covariates, and labels drawn from
    the model with coefficients (-0.5, 1, -2, 0.5, 0) (fixed seed)."""
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, 4))
    design = np.column_stack([np.ones(n), features])
    beta = np.array([-0.5, 1.0, -2.0, 0.5, 0.0])
    labels = (rng.random(n) < special.expit(design @ beta)).astype(float)
    return design, labels


DESIGN, LABELS = _logistic_data()
PRIOR_SD = 10.0


def logistic(beta: Any) -> tuple[float, np.ndarray]:
    """Log posterior of the logistic regression with N(0, 10^2) priors, and its gradient."""
    b = np.asarray(beta, dtype=np.float64)
    eta = DESIGN @ b
    loglik = float(np.sum(LABELS * eta - np.logaddexp(0.0, eta)))
    grad = DESIGN.T @ (LABELS - special.expit(eta)) - b / PRIOR_SD**2
    return loglik - 0.5 * float(b @ b) / PRIOR_SD**2, grad


@functools.cache
def _reference() -> tuple[np.ndarray, np.ndarray]:
    """The posterior mean and sd by self-normalised importance sampling from a Student-t
    (5 degrees of freedom) fitted at the mode: 200 000 draws, whose importance ESS is
    checked to be above 50 000, so the reference's own error is under 1 % of an sd.
    Computed once per test process (the three samplers' tests share it)."""
    mode = optimize.minimize(lambda b: -logistic(b)[0], np.zeros(5), jac=lambda b: -logistic(b)[1])
    p = special.expit(DESIGN @ mode.x)
    hessian = DESIGN.T @ (DESIGN * (p * (1 - p))[:, None]) + np.eye(5) / PRIOR_SD**2
    proposal = stats.multivariate_t(loc=mode.x, shape=np.linalg.inv(hessian), df=5, seed=11)
    draws = proposal.rvs(200_000)
    eta = draws @ DESIGN.T
    log_post = np.sum(LABELS * eta - np.logaddexp(0.0, eta), axis=1)
    log_post -= 0.5 * np.sum(draws**2, axis=1) / PRIOR_SD**2
    log_w = log_post - proposal.logpdf(draws)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    assert 1.0 / np.sum(w**2) > 50_000
    mean = w @ draws
    sd = np.sqrt(w @ (draws - mean) ** 2)
    mean.setflags(write=False)
    sd.setflags(write=False)
    return mean, sd


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["nuts", "hmc", "mala"])
def test_logistic_regression_matches_an_independent_reference(algorithm: str) -> None:
    # Tolerances: each posterior mean within 5 Monte Carlo standard errors of the
    # reference (plus the reference's own 1 % of an sd); each sd within 10 % (the
    # ESS is over 400 per parameter: an sd's relative error about 1 / sqrt(2 ESS) < 4 %).
    mean, sd = _reference()
    runs = sample_chains(
        logistic, 5, algorithm=algorithm, chains=4, warmup=1000, iterations=1000, seed=5, warn=False
    )
    draws = np.stack([r.draws[1000:] for r in runs])
    assert np.all(per_parameter(ess_bulk, draws) > 400)
    flat = draws.reshape(-1, 5)
    mcse = per_parameter(mcse_mean, draws)
    assert np.all(np.abs(flat.mean(axis=0) - mean) < 5 * mcse + 0.01 * sd)
    np.testing.assert_allclose(flat.std(axis=0), sd, rtol=0.1)


# --------------------------------------------------------------------------- 100-d


def _correlated(d: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """An AR(1) correlation 0.9 between neighbours, scales log-spaced from 0.1 to 10."""
    lag = np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    sd = np.logspace(-1, 1, d)
    covariance = 0.9**lag * np.outer(sd, sd)
    return covariance, np.linalg.inv(covariance)


@pytest.mark.slow
def test_nuts_on_a_100_dimensional_correlated_gaussian() -> None:
    covariance, precision = _correlated()

    def f(x: Any) -> tuple[float, np.ndarray]:
        g = -(precision @ x)
        return 0.5 * float(x @ g), g

    runs = sample_chains(
        f,
        100,
        algorithm="nuts",
        chains=2,
        warmup=400,
        iterations=250,
        seed=2,
        options={"metric": "dense"},
        warn=False,
    )
    draws = np.stack([r.draws[400:] for r in runs])
    ess = per_parameter(ess_bulk, draws)
    # Every coordinate mixes (the dense metric learns the correlations), its mean within
    # 5 MCSE of 0, its variance within 5 standard errors: a variance's relative standard
    # error is sqrt(2 / ESS) with the ESS of the squares (about 6 % here).
    assert np.all(ess > 200), ess.min()
    flat = draws.reshape(-1, 100)
    assert np.all(np.abs(flat.mean(axis=0)) < 5 * per_parameter(mcse_mean, draws))
    ess_squares = per_parameter(ess_bulk, draws**2)
    assert np.all(ess_squares > 100), ess_squares.min()
    relative = np.abs(flat.var(axis=0) / np.diag(covariance) - 1.0)
    assert np.all(relative < 5 * np.sqrt(2.0 / ess_squares)), relative.max()
    divergences = sum(int(r.state.divergences) for r in runs)
    assert divergences == 0


# --------------------------------------------------------------------------- funnel


def test_nuts_says_it_cannot_follow_the_funnel() -> None:
    funnel = next(c for c in cases() if c.name.startswith("funnel"))
    assert funnel.gradient is not None
    gradient = funnel.gradient

    def f(x: Any) -> tuple[float, np.ndarray]:
        return funnel.logdensity(x), gradient(x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = sample_chains(
            f, funnel.dim, algorithm="nuts", chains=4, warmup=300, iterations=300, seed=1
        )
    codes = {w.message.finding.code for w in caught if isinstance(w.message, SamplingWarning)}
    # The neck of the funnel makes trajectories diverge: reported per draw and warned.
    diverged = sum(int(r.stat("diverging")[300:].sum()) for r in runs)  # type: ignore[index]
    assert diverged > 0
    assert "divergent" in codes
    assert math.isfinite(sum(float(r.stat("energy")[-1]) for r in runs))  # type: ignore[index]
