"""An improper target (a flat or unbounded log density, e.g. a missing prior) never makes a
sampler raise or leak a numpy warning, and the checks name it in one warning.

Told values that drive adaptation to overflow: every proposal accepted (flat or
increasing log densities), log densities near the float range, and chains started near
it."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.convergence import DRIFT_MAGNITUDE, check
from kameleon.core.diagnostics.findings import Finding
from kameleon.core.interface.chain import Proposal, frozen_array
from kameleon.core.interface.metropolis import metropolis_accept
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.samplers import am
from kameleon.core.tuning.adaptation import MAX_VARIANCE, Welford
from tests.core.evaluations import OPTIONS, tell

ALGORITHMS = sorted(SAMPLERS)
BIG = 1.7e308

#: Told values by iteration ``t`` and proposal: each drives adaptation to widen the
#: proposal at every step, or tells numbers whose differences overflow.
TOLD: dict[str, Callable[[int, Proposal], float]] = {
    "flat": lambda t, p: 0.0,
    "increasing": lambda t, p: float(t),
    "huge increasing": lambda t, p: min(BIG, 1e300 * (t + 1)),
    "alternating extremes": lambda t, p: BIG if t % 2 else -BIG,
    "extremes and -inf": lambda t, p: (0.0, -math.inf, BIG, -BIG)[t % 4],
    "unbounded in x": lambda t, p: float(np.clip(1e300 * np.tanh(p.position[0]), -BIG, BIG)),
}


def drive(
    algorithm: str,
    told: Callable[[int, Proposal], float],
    options: dict[str, object],
    start: float,
    dim: int = 2,
    iterations: int = 600,
    warmup: int = 300,
) -> np.ndarray:
    """Run one chain by ask and tell with ``told``'s values, numpy warnings as errors; the
    chain's positions."""
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(dim, options, warmup=warmup)
    state = sampler.init(np.full(dim, start), params, seed=5, chain=0)
    positions = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for t in range(iterations + 1):
            proposal = sampler.ask(state, params)
            value = told(t, proposal)
            if proposal.kind == "init" and value == -math.inf:
                value = 0.0
            state, _ = tell(sampler, state, params, proposal, value)  # gradients: zeros
            positions.append(state.position)
    return np.array(positions)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", sorted(TOLD))
def test_no_told_value_makes_a_sampler_raise_or_overflow(algorithm: str, kind: str) -> None:
    fields = {f.name for f in dataclasses.fields(SAMPLERS[algorithm].Params)}
    # A gradient sampler is told zero gradients, which its check would rightly refuse
    # (tests/core/test_mala.py): here only the arithmetic is on trial.
    base: dict[str, object] = {"gradient_check": 0} if "gradient_check" in fields else {}
    base.update(OPTIONS.get(algorithm, {}))  # sgld's data_size
    later = {"adaptation": "diminishing"} if "adaptation" in fields else {}
    for options, start in ((base, 0.0), ({**base, **later}, -1e300)):
        positions = drive(algorithm, TOLD[kind], options, start)
        assert np.all(np.isfinite(positions))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["am", "rwm"])  # every one: tests/sdk/test_sdk_sample.py
def test_a_flat_target_runs_with_one_warning_that_names_the_cause(algorithm: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("error", RuntimeWarning)
        results = sample_chains(lambda x: 0.0, 2, algorithm=algorithm, seed=1)
    draws = np.stack([r.draws for r in results])
    assert np.all(np.isfinite(draws))
    assert [w.message.finding.code for w in caught] == ["improper"]  # type: ignore[union-attr]
    assert "improper (not normalisable)" in str(caught[0].message)
    assert "missing prior" in str(caught[0].message)


def test_adaptive_metropolis_keeps_a_bounded_covariance() -> None:
    params = am.make_params(2, {}, warmup=1000)
    state = am.init(np.zeros(2), params, seed=0, chain=0)
    huge = Welford(200, frozen_array([0.0, 0.0]), frozen_array(np.diag([1e300, 1.0]) * 199))
    for moments in (huge, Welford(200, huge.mean, frozen_array(np.full((2, 2), np.inf)))):
        drifted = state.evolve(logdensity=0.0, iteration=500, moments=moments)
        covariance = am.proposal_covariance(drifted, params)
        assert np.all(np.isfinite(covariance)) and covariance.max() < 1e3
        assert np.all(np.isfinite(am.proposal_factor(drifted, params)))
    window = frozen_array(np.diag([MAX_VARIANCE, 1.0]))
    drifted = state.evolve(logdensity=0.0, iteration=500, moments=huge, window_covariance=window)
    assert am.proposal_covariance(drifted, params)[0, 0] <= 2.38**2 / 2 * MAX_VARIANCE * 1.01


def test_welford_overflows_silently() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moments = Welford.empty(2).update(np.array([BIG, 0.0])).update(np.array([-BIG, 0.0]))
    assert not np.all(np.isfinite(moments.covariance()))


def test_a_ratio_that_is_not_a_number_rejects() -> None:
    # Log densities near the float range whose difference overflows against an infinite
    # correction: no number, so no move.
    assert metropolis_accept(BIG, -BIG, -math.inf, 0.5) == (False, 0.0)
    assert metropolis_accept(BIG, -BIG, 0.0, 0.5) == (True, 1.0)  # overflow to +inf: accept


# ------------------------------------------------------------------------- the check

NAMES = ["a", "b"]


def random_walks(chains: int, draws: int, scale: float, seed: int = 0) -> np.ndarray:
    steps = np.random.default_rng(seed).standard_normal((chains, draws, 2))
    return scale * np.cumsum(steps, axis=1)


def codes(found: list[Finding]) -> list[str]:
    return [f.code for f in found]


def test_chains_drifting_to_huge_magnitudes_warn_once() -> None:
    draws = random_walks(4, 1000, 1e20)
    found = check(draws, NAMES, [1.0] * 4)
    assert codes(found) == ["improper"]
    (f,) = found
    assert f.value > DRIFT_MAGNITUDE and f.threshold == DRIFT_MAGNITUDE
    assert f.parameter in NAMES and f.chain is None
    assert "improper (not normalisable)" in f.message and "missing prior" in f.message
    # Without improper, the same draws give a warning per parameter and check.
    small = check(random_walks(4, 1000, 1.0), NAMES, [1.0] * 4)
    assert "improper" not in codes(small) and len(small) > 4


def test_a_flat_log_density_that_accepts_everything_warns() -> None:
    draws = random_walks(4, 1000, 1.0)
    flat = np.zeros((4, 1000))
    assert codes(check(draws, NAMES, [1.0] * 4, log_density=flat)) == ["improper"]
    # A uniform target on a box rejects what leaves it: not improper.
    assert "improper" not in codes(check(draws, NAMES, [0.4] * 4, log_density=flat))


def test_a_log_density_that_keeps_rising_warns() -> None:
    draws = random_walks(4, 1000, 1.0)
    rising = np.cumsum(np.random.default_rng(1).exponential(size=(4, 1000)), axis=1)
    assert codes(check(draws, NAMES, [0.5] * 4, log_density=rising)) == ["improper"]
    wobbling = np.random.default_rng(2).standard_normal((4, 1000))
    assert "improper" not in codes(check(draws, NAMES, [0.5] * 4, log_density=wobbling))


def test_chains_that_agree_never_warn_improper() -> None:
    draws = np.random.default_rng(3).standard_normal((4, 1000, 2)) * 1e20
    flat = np.zeros((4, 1000))
    assert check(draws, NAMES, [0.3] * 4, log_density=flat) == []
