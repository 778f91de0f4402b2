"""Adaptive Metropolis: covariance estimate, nugget, global scale and adaptation modes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kameleon.core.diagnostics.summary import mcse_mean, per_parameter
from kameleon.core.interface.documents import encode
from kameleon.core.interface.sampler import OptionError
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.running.inprocess import run_chain
from kameleon.core.samplers import am
from kameleon.core.tuning.adaptation import Welford
from kameleon.core.validation.targets import Gaussian

TARGET = Gaussian([1.0, -1.0, 0.5], [[2.0, 1.2, 0.3], [1.2, 1.5, -0.4], [0.3, -0.4, 0.8]])

# Haario's AM, one covariance estimate over the whole warm-up: the mechanics these unit
# tests check (the doubling windows have their own tests at the end).
HAARIO = {"windows": False}


def _flat(x: np.ndarray) -> float:
    return 0.0


def _initialised(params: am.Params, start: np.ndarray) -> am.State:
    state = am.init(start, params, seed=0, chain=0)
    state, _ = am.tell(state, params, am.ask(state, params), 0.0)
    return state


def test_defaults() -> None:
    params = am.make_params(3, HAARIO, warmup=10)
    assert params.start == 100
    assert am.make_params(80, HAARIO, warmup=10).start == 160
    assert am.make_params(3, {**HAARIO, "adapt_start": 7}, warmup=10).start == 7


def test_initial_proposal_is_isotropic_with_the_random_walk_scale() -> None:
    params = am.make_params(4, {**HAARIO, "initial_scale": 3.0}, warmup=10)
    state = _initialised(params, np.zeros(4))
    expected = 3.0**2 * (1 + params.nugget) * 2.38**2 / 4 * np.eye(4)
    np.testing.assert_allclose(am.proposal_covariance(state, params), expected, rtol=1e-15)


def test_every_warmup_state_enters_the_covariance_estimate() -> None:
    params = am.make_params(3, HAARIO, warmup=400)
    result = run_chain(am.SAMPLER, params, TARGET.logdensity, TARGET.mean, 600, seed=1, chain=0)
    moments = result.state.moments
    warmup_draws = result.draws[:400]
    assert moments.count == 400
    np.testing.assert_allclose(moments.mean, warmup_draws.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(moments.covariance(), np.cov(warmup_draws.T), rtol=1e-10, atol=1e-12)
    # Past adapt_start the proposal uses that estimate.
    expected = (
        math.exp(result.state.log_lambda)
        * 2.38**2
        / 3
        * (np.cov(warmup_draws.T) + 1e-6 * np.eye(3))
    )
    np.testing.assert_allclose(am.proposal_covariance(result.state, params), expected, rtol=1e-9)


def test_covariance_estimate_converges_to_the_target_covariance() -> None:
    # Four chains from exact draws: after 3000 warm-up iterations, each entry of the
    # estimated covariance is the average of (x_i - m_i)(x_j - m_j) over the chain; its
    # error is compared with 5 Monte Carlo standard errors of that average (estimated
    # from the autocorrelation of the products across the chains), plus 2% for the
    # early, not yet adapted, part of the history.
    params = am.make_params(3, HAARIO, warmup=3000)
    starts = TARGET.sample(4, np.random.default_rng(2))
    runs = [
        run_chain(am.SAMPLER, params, TARGET.logdensity, starts[c], 3000, seed=2, chain=c)
        for c in range(4)
    ]
    centred = np.stack([run.draws for run in runs]) - TARGET.mean
    products = centred[..., :, None] * centred[..., None, :]
    tolerance = 5 * per_parameter(mcse_mean, products) + 0.02 * np.abs(TARGET.covariance).max()
    for run in runs:
        error = np.abs(run.state.moments.covariance() - TARGET.covariance)
        assert np.all(error < 2 * tolerance)  # one chain: a standard error sqrt(4) larger
    pooled = products.mean(axis=(0, 1))
    np.testing.assert_array_less(np.abs(pooled - TARGET.covariance), tolerance)


def test_nugget_keeps_the_proposal_positive_definite_for_a_degenerate_history() -> None:
    params = am.make_params(3, {**HAARIO, "adapt_start": 10}, warmup=100)
    state = _initialised(params, np.ones(3))
    stuck, on_a_line = Welford.empty(3), Welford.empty(3)
    for k in range(50):
        stuck = stuck.update(np.ones(3))  # every proposal rejected: zero covariance
        on_a_line = on_a_line.update(np.array([k, 2.0 * k, 0.0]))  # rank one
    for moments in (stuck, on_a_line):
        degenerate = dataclasses.replace(state, moments=moments)
        covariance = am.proposal_covariance(degenerate, params)
        smallest = np.linalg.eigvalsh(covariance).min()
        assert smallest >= 0.99 * params.nugget * 2.38**2 / 3
        step = am.ask(degenerate, params).position - degenerate.position
        assert np.all(step != 0)


def test_rounding_that_breaks_the_cholesky_factor_is_absorbed_by_jitter() -> None:
    # A history of huge spread along a line: the nugget (1e-6) is below the rounding
    # error of the factorisation (1e-16 * 1e12), so plain Cholesky fails.
    params = am.make_params(3, {**HAARIO, "adapt_start": 10}, warmup=100)
    moments = Welford.empty(3)
    for k in range(50):
        moments = moments.update(1e6 * k * np.array([1.0, 1.0 / 3.0, 1.0 / 7.0]))
    state = dataclasses.replace(_initialised(params, np.zeros(3)), moments=moments)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(am.proposal_covariance(state, params))
    proposal = am.ask(state, params)
    assert np.all(np.isfinite(proposal.position))


def test_scale_moves_toward_the_target_acceptance() -> None:
    params = am.make_params(2, HAARIO, warmup=50)
    one = run_chain(am.SAMPLER, params, _flat, np.zeros(2), 1, seed=3, chain=0).state
    assert one.log_lambda == pytest.approx(1.0 - 0.234)  # gain 1, min(1, alpha) = 1
    many = run_chain(am.SAMPLER, params, _flat, np.zeros(2), 50, seed=3, chain=0).state
    assert many.log_lambda > one.log_lambda

    def reject_all(x: np.ndarray) -> float:
        return 0.0 if not np.any(x) else -math.inf

    shrunk = run_chain(am.SAMPLER, params, reject_all, np.zeros(2), 50, seed=3, chain=0).state
    assert shrunk.log_lambda < -1.0
    # Every state is still recorded (the same one, over and over).
    assert shrunk.moments.count == 50 and np.all(shrunk.moments.m2 == 0)


def test_warmup_mode_freezes_everything_after_warmup() -> None:
    params = am.make_params(3, {**HAARIO, "adapt_start": 20}, warmup=60)
    at_warmup = run_chain(
        am.SAMPLER, params, TARGET.logdensity, TARGET.mean, 60, seed=4, chain=0
    ).state
    later = run_chain(
        am.SAMPLER, params, TARGET.logdensity, TARGET.mean, 300, seed=4, chain=0
    ).state
    assert later.log_lambda == at_warmup.log_lambda
    assert encode(later.moments) == encode(at_warmup.moments)
    assert later.moments.count == 60


def test_diminishing_mode_keeps_estimating_the_covariance() -> None:
    params = am.make_params(
        3, {**HAARIO, "adaptation": "diminishing", "adapt_start": 20}, warmup=60
    )
    state = run_chain(
        am.SAMPLER, params, TARGET.logdensity, TARGET.mean, 300, seed=5, chain=0
    ).state
    assert state.moments.count == 300


def test_moments_are_the_cold_part_of_the_state() -> None:
    params = am.make_params(3, HAARIO, warmup=10)
    hot, cold = encode(_initialised(params, np.zeros(3)))
    assert set(cold) == {"moments", "window_covariance"}
    assert not set(cold) & set(hot["v"])


def test_fixed_scale_variant() -> None:
    params = am.make_params(3, {**HAARIO, "adapt_scale": False, "adapt_start": 20}, warmup=60)
    state = run_chain(
        am.SAMPLER, params, TARGET.logdensity, TARGET.mean, 100, seed=6, chain=0
    ).state
    assert state.log_lambda == 0.0 and state.moments.count == 60


def test_adapted_chain_reaches_the_target_acceptance() -> None:
    # A strongly correlated Gaussian in d = 5 (condition number ~ 300), where an
    # isotropic random walk is poor: after warm-up AM's acceptance is near 0.234.
    # 4000 correlated accept indicators: standard error about 0.015; +-0.06 leaves room
    # for the remaining error of the adapted scale.
    rng = np.random.default_rng(7)
    rotation, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    covariance = rotation @ np.diag([0.05, 0.3, 1.0, 4.0, 15.0]) @ rotation.T
    target = Gaussian(np.zeros(5), covariance)
    params = am.make_params(5, HAARIO, warmup=3000)
    result = run_chain(am.SAMPLER, params, target.logdensity, np.zeros(5), 7000, seed=7, chain=0)
    assert abs(np.mean(result.accepted[3000:]) - 0.234) < 0.06


@pytest.mark.parametrize(
    "options",
    [
        {"initial_scale": 0.0},
        {"adapt_start": 1},
        {"nugget": 0.0},
        {"nugget": -1e-3},
        {"target_acceptance": 0.0},
        {"adaptation": "always"},
    ],
)
def test_out_of_range_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(OptionError):
        am.make_params(3, options, warmup=10)


def test_windows_restart_the_estimate_and_the_scale_at_doubling_ends() -> None:
    params = am.make_params(2, {}, warmup=3200)
    ends = (100, 200, 400, 800, 1600)  # 3200 / 32, ..., 3200 / 2
    state = _initialised(params, np.zeros(2))
    for t in range(1, 3201):
        proposal = am.ask(state, params)
        state, _ = am.tell(
            state, params, proposal, -0.5 * float(proposal.position @ proposal.position)
        )
        if t in ends:
            assert state.moments.count == 0 and state.log_lambda == 0.0
            assert state.window_covariance is not None
    assert state.moments.count == 1600  # the last window, (1600, 3200]


@pytest.mark.parametrize(
    ("warmup", "options", "ends"),
    [
        (640, {}, (160, 320)),  # 20, 40 and 80 would hold fewer than adapt_start = 100
        (640, {"adapt_start": 20}, (20, 40, 80, 160, 320)),
        (150, {}, ()),  # one window: the whole warm-up
    ],
)
def test_a_window_holds_at_least_adapt_start_states(
    warmup: int, options: dict[str, int], ends: tuple[int, ...]
) -> None:
    params = am.make_params(2, options, warmup=warmup)
    state = _initialised(params, np.zeros(2))
    restarts = []
    for t in range(1, warmup + 1):
        proposal = am.ask(state, params)
        state, _ = am.tell(
            state, params, proposal, -0.5 * float(proposal.position @ proposal.position)
        )
        if state.moments.count == 0:
            restarts.append(t)
    assert tuple(restarts) == ends


def test_windows_find_scales_a_million_apart() -> None:
    # Scales 1e-3 and 1e3: the first proposals (scale 1) are a thousand times too wide in
    # one coordinate and too narrow in the other; the windows correct both.
    scales = np.array([1e-3, 1e3])
    params = am.make_params(2, {}, warmup=3000)
    state = _initialised(params, np.zeros(2))
    for _ in range(3000):
        proposal = am.ask(state, params)
        state, _ = am.tell(
            state, params, proposal, -0.5 * float(np.sum((proposal.position / scales) ** 2))
        )
    assert state.window_covariance is not None
    estimate = np.sqrt(np.diag(state.moments.covariance()))
    assert np.all(np.abs(np.log(estimate / scales)) < np.log(2)), estimate


def test_the_frozen_factor_is_remembered_and_is_the_one_computed_afresh() -> None:
    params = am.make_params(3, {}, warmup=120)
    result = run_chain(am.SAMPLER, params, TARGET.logdensity, np.zeros(3), 150, seed=4, chain=0)
    state = result.state
    assert state.iteration > params.warmup  # past warm-up: the covariance is frozen
    fresh = jittered_cholesky(am.proposal_covariance(state, params))
    first = am.proposal_factor(state, params)
    assert first.tobytes() == fresh.tobytes()
    assert am.proposal_factor(state, params) is first  # remembered
    # A state with other moments, even equal ones, is factored on its own.
    other = state.evolve(moments=Welford(state.moments.count, state.moments.mean, state.moments.m2))
    assert am.proposal_factor(other, params) is not first
    # So is one whose scale differs.
    scaled = state.evolve(log_lambda=state.log_lambda + 0.5)
    assert am.proposal_factor(scaled, params).tobytes() != first.tobytes()
    # During warm-up nothing is remembered: the covariance changes at every iteration.
    early = dataclasses.replace(state, iteration=params.warmup - 1)
    assert am.proposal_factor(early, params) is not am.proposal_factor(early, params)


def test_evolve_is_replace_and_refuses_unknown_fields() -> None:
    state = _initialised(am.make_params(3, {}, warmup=10), np.zeros(3))
    assert state.evolve(iteration=5) == dataclasses.replace(state, iteration=5)
    with pytest.raises(TypeError, match="no field"):
        state.evolve(nonsense=1)
