"""Every sampler leaves its target invariant: post-warm-up moments match the truth.

Each test runs independent chains started from exact draws of the target (so there is no
burn-in bias to wait for) and compares the pooled post-warm-up means and variances with
the true ones, within 5 Monte Carlo standard errors plus a floor of 1% of the scale.

The standard error of the average of ``f(x)`` is ``sd(f) / sqrt(ESS)``: the effective
sample size comes from the chains' autocorrelations
(:func:`core.diagnostics.summary.ess_mean`, split chains), and ``sd(f)`` is the target's, computed from
exact draws. With the chains' own ``sd(f)`` a heavy-tailed ``f`` (``y_2^2`` of the
banana, whose arms a random walk visits rarely) gives errors and standard errors that
are both too small together, and skewed z-scores. 5 standard errors make a false alarm
of a correct sampler a less-than-one-in-a-million event per comparison under a normal
approximation; the floor absorbs the error of the effective sample size estimate. A
sampler that mixes too little for the estimate to mean anything fails the minimum
effective sample size check rather than passing with a huge tolerance. More chains give
the autocorrelation estimate more to see (a chain that missed the banana's arms is
outvoted by the others).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.autocorr import by_walker
from kameleon.core.diagnostics.summary import ess_mean, per_parameter
from kameleon.core.running.inprocess import run_chain
from kameleon.core.validation.targets import Banana, Gaussian
from tests.core.evaluations import for_sampler

pytestmark = pytest.mark.slow  # statistical: long chains of every sampler

SEED = 11
MIN_ESS = 25  # pooled over the chains, per quantity
N_EXACT = 200_000  # exact draws for the target's sd(f)

_SD_5 = np.array([0.5, 1.0, 1.5, 2.0, 1.0])
TARGETS: dict[str, Gaussian | Banana] = {
    "gaussian-2d": Gaussian([1.0, -2.0], [[1.0, 1.6], [1.6, 4.0]]),
    # Equicorrelated (0.6) with unequal scales: condition number about 50.
    "gaussian-5d": Gaussian(
        [0.5, -1.0, 0.0, 2.0, 1.0],
        np.outer(_SD_5, _SD_5) * (0.6 + 0.4 * np.eye(5)),
    ),
    "banana-2d": Banana(2, b=0.03, v=100.0),
}

# (chains, warm-up, post-warm-up draws per chain): cheap random walks run more chains;
# kernel HMC costs tens of surrogate gradients per iteration and runs fewer. Samplers not
# listed get the default. Shorter runs mean larger standard errors, and tolerances.
RUNS = {
    "rwm": (8, 500, 1500),
    "am": (8, 1000, 1500),
    "kameleon": (8, 1000, 800),
    "kmc-lite": (8, 1000, 1000),
    "kmc-finite": (4, 1000, 1000),
    "mala": (8, 2000, 6000),
    "hmc": (4, 500, 1000),
    "nuts": (4, 500, 1000),
    # One coordinate at a time: slow along the banana's bend, which needs more draws.
    "gibbs": (8, 1000, 4000),
    # 8 walkers (the default in 2 and 4 dimensions, 10 in 5): 500 and 2000 sweeps.
    "ensemble": (4, 4000, 16000),
}
DEFAULT_RUN = (4, 500, 1000)
# Per target, where a sampler's default run is more than the target needs. gibbs on the
# 5-d Gaussian updates five coordinates per sweep (its most expensive case) and needs
# fewer sweeps than on the banana: with 1500 draws per chain the pooled ESS (this seed)
# is over 400 for the means and 1000 for the squares, and the tolerance (5 MCSE + 1 %
# of the scale, from the run's own ESS, as everywhere here) under 0.26 sd for a mean and
# 0.16 sd for a variance: a mean off by 0.3 sd still fails. On the 2-d Gaussian the
# same (8, 500, 1500) gives gibbs a pooled ESS over 500 for the means and 790 for the
# squares (seeds 11, 12 and 13), tolerances under 0.23 sd and 0.19 sd(f), errors at
# most 0.26 of their tolerance: a mean off by 0.25 sd still fails. hmc on the 5-d
# Gaussian moves almost independently (ESS near one per draw for the means): with 500
# draws per chain its pooled ESS is over 1900 for the means and 740 for the squares
# (seeds 11 to 13), the tolerances under 0.13 sd and 0.19 sd(f), the errors at most 0.40
# of them: a mean off by 0.15 sd still fails.
# kmc-lite on the 2-d banana needs the longer warm-up: at 1 000 a chain that has not
# learnt an arm's tip misses it, and the pooled ESS of the squares falls under 25 on some
# seeds, with the map learnt in windows of 10 states' prior weight (seed 12: 15) as with
# the window weights of core.tuning.shrinkage.window_weight (seeds 11 and 14: 20
# and 19). At 2 000 the ESS is 120 to 530 on seeds 11, 12 and 13, and seed 14 still has
# such a chain (15 to 48): a weakness of kmc-lite on bent targets at short warm-ups,
# BENCHMARKS.md section 4.
# kmc-finite on the 2-d banana, with enough chains and warm-up for the check to mean
# something, is wrong on one seed of six: 16 chains x (2 000 + 1 000) give the mean of x2
# 5 standard errors off. With the map's linear shrinkage (a39f4b6) that seed was 11; with
# today's (core.tuning.shrinkage.shrunk_factor), whose scouting draws differ, it is
# 13 (the mean of x2 at -0.99 against a tolerance of 0.97), and 11, 12, 14, 15, 16 pass.
# sample() warns on that run (R-hat 1.06, bulk ESS 168 of 16 000). At 4 x (1 000 +
# 1 000) the seed passed, by luck: the pooled ESS falls under the floor on two of seeds
# 11..16, and the tolerance is wide. The random Fourier features' surrogate is the
# likely cause (BENCHMARKS.md section 6: it sits in one arm on the 8-d banana), not yet
# fixed: the case runs at the seed that shows it, and must fail, until it is.
KNOWN_WRONG = {("kmc-finite", "banana-2d")}
SEED_BY_CASE = {("kmc-finite", "banana-2d"): 13}
RUNS_BY_TARGET = {
    ("kmc-finite", "banana-2d"): (16, 2000, 1000),
    ("kmc-lite", "banana-2d"): (8, 2000, 1000),
    ("gibbs", "gaussian-5d"): (8, 500, 1500),
    ("gibbs", "gaussian-2d"): (8, 500, 1500),
    ("hmc", "gaussian-5d"): (4, 500, 500),
}


def _draws(name: str, target_name: str) -> np.ndarray:
    """Post-warm-up draws, shape ``(chains, n, dim)``; an ensemble's with each walker's
    whole sweeps as a chain (its chain interleaves them: an ESS of the interleaved
    draws would miss the autocorrelation at lags of a sweep)."""
    sampler = SAMPLERS[name]
    target = TARGETS[target_name]
    chains, warmup, n = RUNS_BY_TARGET.get((name, target_name), RUNS.get(name, DEFAULT_RUN))
    seed = SEED_BY_CASE.get((name, target_name), SEED)
    params = sampler.make_params(target.dim, {}, warmup=warmup)
    starts = target.sample(chains, np.random.default_rng(seed))
    fn = for_sampler(sampler, target.logdensity)  # with its gradient, for one that needs it
    runs = [
        run_chain(sampler, params, fn, starts[c], warmup + n, seed=seed, chain=c)
        for c in range(chains)
    ]
    draws = np.stack([run.draws[warmup:] for run in runs])
    if sampler.ensemble_size is None:
        return draws
    walkers = by_walker(draws, sampler.ensemble_size(params), warmup + 1)
    c, sweeps, w, d = walkers.shape
    return walkers.transpose(0, 2, 1, 3).reshape(c * w, sweeps, d)


@functools.cache
def _target_sds(target_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The target's standard deviations of ``x`` and of ``(x - mean)^2``."""
    target = TARGETS[target_name]
    exact = target.sample(N_EXACT, np.random.default_rng(0))
    return exact.std(axis=0), ((exact - target.mean) ** 2).std(axis=0)


def _assert_average(
    values: np.ndarray, truth: np.ndarray, sd: np.ndarray, floor: np.ndarray
) -> None:
    ess = per_parameter(ess_mean, values)
    assert np.all(ess > MIN_ESS), f"effective sample sizes {ess} are too small"
    estimate = values.mean(axis=(0, 1))
    tolerance = 5 * sd / np.sqrt(ess) + floor
    assert np.all(np.abs(estimate - truth) < tolerance), (
        f"estimate {estimate}, truth {truth}, tolerance {tolerance}"
    )


@pytest.mark.parametrize("target_name", sorted(TARGETS))
# Not sgld: without accept/reject it leaves an approximation invariant, not the target
# (biased by design; its own accuracy test is tests/core/test_sgld.py). Not importance:
# its draws are weighted, not a chain's (tests/core/test_importance.py).
@pytest.mark.parametrize("name", sorted(set(SAMPLERS) - {"sgld", "importance"}))
def test_moments_match_the_target(
    name: str, target_name: str, request: pytest.FixtureRequest
) -> None:
    if (name, target_name) in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason="KNOWN_WRONG above"))
    target = TARGETS[target_name]
    draws = _draws(name, target_name)
    sd_x, sd_square = _target_sds(target_name)
    scale = np.sqrt(target.variance)
    _assert_average(draws, target.mean, sd_x, 0.01 * scale)
    _assert_average((draws - target.mean) ** 2, target.variance, sd_square, 0.01 * scale**2)
