"""Random-walk Metropolis: scale, its adaptation, and the options."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from kameleon.core.interface.sampler import OptionError
from kameleon.core.running.inprocess import run_chain
from kameleon.core.samplers import rwm
from kameleon.core.validation.targets import Gaussian


def _flat(x: np.ndarray) -> float:
    """Every proposal is accepted with probability 1."""
    return 0.0


def _reject_all(x: np.ndarray) -> float:
    """Only the origin, the initial point, is in the support: every proposal is rejected."""
    return 0.0 if not np.any(x) else -math.inf


def test_default_scale_is_the_optimal_isotropic_one() -> None:
    params = rwm.make_params(8, {}, warmup=0)
    assert params.initial_scale == pytest.approx(2.38 / math.sqrt(8))
    state = rwm.init(np.zeros(8), params, seed=0, chain=0)
    assert state.log_scale == pytest.approx(math.log(2.38 / math.sqrt(8)))


def test_proposal_increments_have_the_scale() -> None:
    # In d = 4000 the sample sd of one proposal's increments has a relative standard
    # error of 1 / sqrt(2 d) ~ 1.1%: within 6% is more than 5 standard errors.
    params = rwm.make_params(4000, {"scale": 0.3}, warmup=0)
    result = run_chain(rwm.SAMPLER, params, _flat, np.zeros(4000), 1, seed=1, chain=0)
    assert result.accepted[0]
    assert np.std(result.draws[0]) == pytest.approx(0.3, rel=0.06)


@pytest.mark.parametrize(("logdensity_fn", "direction"), [(_flat, 1), (_reject_all, -1)])
def test_scale_moves_toward_the_target_acceptance(
    logdensity_fn: Callable[[np.ndarray], float], direction: int
) -> None:
    params = rwm.make_params(2, {}, warmup=50)
    start = math.log(params.initial_scale)
    result = run_chain(rwm.SAMPLER, params, logdensity_fn, np.zeros(2), 1, seed=2, chain=0)
    # First Robbins-Monro step, gain 1: log s += min(1, alpha) - 0.234.
    expected = start + (1.0 - 0.234 if direction > 0 else -0.234)
    assert result.state.log_scale == pytest.approx(expected)
    longer = run_chain(rwm.SAMPLER, params, logdensity_fn, np.zeros(2), 50, seed=2, chain=0)
    assert direction * (longer.state.log_scale - result.state.log_scale) > 0


def test_warmup_mode_freezes_the_scale_after_warmup() -> None:
    params = rwm.make_params(2, {}, warmup=30)
    at_warmup = run_chain(rwm.SAMPLER, params, _flat, np.zeros(2), 30, seed=3, chain=0).state
    later = run_chain(rwm.SAMPLER, params, _flat, np.zeros(2), 300, seed=3, chain=0).state
    assert at_warmup.log_scale != math.log(params.initial_scale)
    assert later.log_scale == at_warmup.log_scale


def test_diminishing_mode_keeps_adapting_ever_more_rarely() -> None:
    params = rwm.make_params(2, {"adaptation": "diminishing"}, warmup=30)
    state = rwm.init(np.zeros(2), params, seed=4, chain=0)
    state, _ = rwm.tell(state, params, rwm.ask(state, params), 0.0)
    changed = []
    for _ in range(3000):
        new, _ = rwm.tell(state, params, rwm.ask(state, params), 0.0)
        changed.append(new.log_scale != state.log_scale)
        state = new
    after = np.array(changed[30:])  # iterations 31..3000
    # Iteration t adapts with probability t^-1/2: 2 (sqrt(1515) - sqrt(30)) ~ 67 times in
    # 31..1515 and 2 (sqrt(3000) - sqrt(1515)) ~ 32 times in 1516..3000, with Poisson-like
    # standard deviations of about 8 and 6. The bounds are 4 to 5 of those.
    first, second = np.count_nonzero(after[:1485]), np.count_nonzero(after[1485:])
    assert 35 < first < 100
    assert 8 < second < 60
    assert first > second


def test_no_adaptation_when_disabled() -> None:
    params = rwm.make_params(2, {"adapt_scale": False}, warmup=100)
    state = run_chain(rwm.SAMPLER, params, _flat, np.zeros(2), 100, seed=5, chain=0).state
    assert state.log_scale == math.log(params.initial_scale)


def test_adapted_scale_reaches_the_target_acceptance() -> None:
    # After 2000 warm-up iterations the post-warm-up acceptance rate of a Gaussian in
    # d = 4 should be near 0.234; 4000 correlated accept indicators have a standard error
    # of about 0.015, so 0.234 +- 0.06 is about 4 standard errors plus the remaining
    # error of the adapted scale.
    target = Gaussian(np.zeros(4), np.diag([1.0, 2.0, 0.5, 1.0]))
    params = rwm.make_params(4, {}, warmup=2000)
    result = run_chain(rwm.SAMPLER, params, target.logdensity, np.zeros(4), 6000, seed=6, chain=0)
    assert abs(np.mean(result.accepted[2000:]) - 0.234) < 0.06


@pytest.mark.parametrize(
    "options",
    [{"scale": 0.0}, {"scale": -1.0}, {"target_acceptance": 1.0}, {"adaptation": "sometimes"}],
)
def test_out_of_range_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(OptionError):
        rwm.make_params(2, options, warmup=10)
