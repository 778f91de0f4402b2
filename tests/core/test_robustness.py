"""Numerical failures degrade gracefully: a factorisation that rounding breaks, or a fit
from absurd inputs, never reaches the caller as an exception."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kameleon.core.interface.chain import frozen_array
from kameleon.core.kernels.score_matching import finite_update
from kameleon.core.samplers import kameleon, kmc_finite, kmc_lite


def test_kamh_woodbury_density_survives_a_rounded_indefinite_s() -> None:
    # d > n: the Woodbury branch factors S = I + rho G G^T. With rho ~ 1e20 and rows
    # that are nearly equal, rounding makes the computed S indefinite.
    rng = np.random.default_rng(0)
    M = np.ones((3, 8)) + 1e-9 * rng.standard_normal((3, 8))
    value = kameleon.log_density_woodbury(rng.standard_normal(8), 1e-20, 1.0, M)
    assert math.isfinite(value)


def test_kmc_finite_drops_a_batch_that_would_ruin_the_factor() -> None:
    params = kmc_finite.make_params(2, {"preconditioning": "none", "num_features": 10}, warmup=0)
    state = kmc_finite.init(np.zeros(2), params, seed=0, chain=0)
    omega = frozen_array(np.ones((2, 10)))
    phase = frozen_array(np.zeros(10))
    factor, b = frozen_array(np.eye(10)), frozen_array(np.zeros(10))
    state = dataclasses.replace(
        state, logdensity=0.0, omega=omega, phase=phase, factor=factor, b=b, theta=b
    )
    points = np.array([[1.0, 2.0]])
    weights = np.array([math.inf])
    try:
        finite_update(factor, b, points, omega, phase, weights)
        raised = False
    except FloatingPointError:
        raised = True
    assert raised  # the raw update does raise on this batch
    after = kmc_finite._fold(state, points, weights)
    assert after.factor is factor and after.b is b  # statistics unchanged
    assert len(after.pending) == 0 and len(after.pending_weights) == 0


def test_kmc_lite_keeps_its_surrogate_when_a_refit_fails() -> None:
    params = kmc_lite.make_params(
        2, {"preconditioning": "none", "min_history": 2, "num_centres": 4}, warmup=100
    )
    state = kmc_lite.init(np.zeros(2), params, seed=0, chain=0)
    # A reservoir with a non-finite row makes the fit fail.
    reservoir = frozen_array([[0.0, 0.0], [1.0, 1.0], [np.inf, 0.0]])
    state = dataclasses.replace(state, logdensity=0.0, reservoir=reservoir, history_size=3)
    with np.errstate(invalid="ignore", over="ignore"):
        after = kmc_lite._collect(state, params, 1.0)
    assert after.alpha is None and after.bandwidth is None  # still the random walk


def test_a_proposal_whose_arithmetic_overflowed_stays_put() -> None:
    # Staying put leaves any target invariant, and no client is handed a point with an
    # infinity or a NaN in it (JSON has neither).
    from kameleon.core.interface.metropolis import metropolis_ask, tell_initial
    from kameleon.core.samplers import rwm

    params = rwm.make_params(2, {}, warmup=10)
    state = rwm.init(np.array([0.5, -1.0]), params, seed=1, chain=0)
    state, _ = tell_initial(state, rwm.ask(state, params), -1.0)

    def overflowing(state: object, params: object, rng: object) -> tuple[np.ndarray, float]:
        return np.array([np.inf, 1.0]), float("nan")

    proposal = metropolis_ask(state, params, overflowing)
    assert proposal.kind == "proposal" and proposal.iteration == 1
    assert np.array_equal(proposal.position, state.position)
    assert proposal.log_correction == 0.0
