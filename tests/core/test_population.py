"""A population's diagnostics (``core/diagnostics/population.py``) on populations built by hand: the
error of a chain's mean with and without a part that persists through the run, R-hat
across chains in agreement and not, ``chain_mean`` and ``short_run``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kameleon.core.diagnostics.population import (
    Population,
    population_findings,
    population_summaries,
    population_times,
    short_run_findings,
)

KAPPA = 4.0


def _ar1(rng: np.random.Generator, shape: tuple[int, ...], phi: float) -> np.ndarray:
    """Stationary unit-variance AR(1) series along axis 1 of ``shape``."""
    out = np.empty(shape)
    out[:, 0] = rng.standard_normal(out[:, 0].shape)
    noise = math.sqrt(1 - phi * phi)
    for s in range(1, shape[1]):
        out[:, s] = phi * out[:, s - 1] + noise * rng.standard_normal(out[:, s].shape)
    return out


def test_independent_particles_have_the_error_of_their_moves() -> None:
    """Particles without a persistent part: ``V`` is the variance of their averages over
    ``N``, and ``kappa`` enters only through the noise of the halves' covariance, which
    is clipped at 0: ``V`` within 0.8 and 1.6 times the truth (about 1.3 expected: the
    covariance's sd is ``A / sqrt(N)``, its positive part is counted ``kappa`` times)."""
    rng = np.random.default_rng(0)
    y = _ar1(rng, (1, 400, 64), 0.5)  # tau = 3: the average's variance is 3 / 400
    p = Population.of(y, KAPPA)
    assert 0.8 < float(p.errors[0]) / (3 / 400 / 64) < 1.6, p.errors


def test_a_persistent_part_counts_kappa_times() -> None:
    """Each particle sits at its own level for the whole run (a mode), plus small
    noise: ``V`` is ``kappa`` times the levels' variance over ``N``, within 25%."""
    rng = np.random.default_rng(1)
    levels = rng.standard_normal((1, 1, 64))
    y = levels + 0.1 * rng.standard_normal((1, 200, 64))
    p = Population.of(y, KAPPA)
    expected = KAPPA * float(np.var(levels, ddof=1)) / 64
    assert abs(float(p.errors[0]) / expected - 1) < 0.25, (p.errors, expected)


def test_chains_that_agree_have_rhat_one_and_chains_apart_do_not() -> None:
    """8 chains of 32 particles, each particle at a level of its own (a mode it never
    leaves) drawn from the same distribution: R-hat is 1 though each particle alone
    would say the chains do not mix. Half the chains' levels shifted by 3 sd: R-hat
    far above 1.01, and most chains named by ``chain_mean``."""
    rng = np.random.default_rng(2)
    levels = np.where(rng.random((8, 1, 32, 1)) < 0.7, 6.0, -6.0)
    walkers = levels + _ar1(rng, (8, 50, 32, 1), 0.5)
    right = population_summaries(walkers, ["a"], KAPPA)[0]
    assert right["r_hat"] == 1.0, right
    assert population_findings(walkers, ["a"], KAPPA) == []
    apart = walkers.copy()
    apart[:4] += 3 * float(np.std(walkers))
    wrong = population_summaries(apart, ["a"], KAPPA)[0]
    assert wrong["r_hat"] > 1.1, wrong
    named = {f.chain for f in population_findings(apart, ["a"], KAPPA)}
    assert len(named) >= 4, named


def test_the_ess_never_exceeds_what_the_chains_spread_allows() -> None:
    """Chains whose means differ more than their particles say (a persistent offset per
    chain, as a population whose resampling was worse than ``kappa``): the ESS is
    taken from the chains' spread, under what ``V`` alone would give."""
    rng = np.random.default_rng(3)
    walkers = rng.standard_normal((8, 40, 32, 1)) + 0.3 * rng.standard_normal((8, 1, 1, 1))
    s = population_summaries(walkers, ["a"], KAPPA)[0]
    means = walkers[..., 0].mean(axis=(1, 2))
    spread = float(np.var(means, ddof=1)) / 8
    assert s["mcse_mean"] >= math.sqrt(spread) * (1 - 1e-12), (s, spread)
    assert s["ess_bulk"] < 8 * 40 * 32 / 4, s


def test_short_run_when_the_particles_have_not_moved() -> None:
    """A third of the particles did not move after warm-up: ``short_run``; a tenth:
    not."""
    rng = np.random.default_rng(4)
    walkers = _ar1(rng, (4, 6, 30), 0.5)[..., None]
    frozen = walkers.copy()
    frozen[:, :, :10] = frozen[:, :1, :10]
    (finding,) = short_run_findings(frozen)
    assert finding.code == "short_run" and finding.value == pytest.approx(1 / 3)
    frozen = walkers.copy()
    frozen[:, :, :3] = frozen[:, :1, :3]
    assert short_run_findings(frozen) == []


def test_a_particle_that_never_moved_leaves_the_time_defined() -> None:
    rng = np.random.default_rng(5)
    walkers = _ar1(rng, (2, 30, 16), 0.5)[..., None]
    walkers[0, :, 3] = walkers[0, 0, 3]
    (tau,) = population_times(walkers)
    assert math.isfinite(tau), tau
