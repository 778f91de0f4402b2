"""MALA with the client's gradients: exactness whatever the units, its warm-up, and the
check that catches a wrong gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.summary import ess_bulk
from kameleon.core.gradients.check import GradientMismatch
from kameleon.core.interface.sampler import tell_one
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.samplers import mala

SCALES = np.array([1e-4, 1.0, 1e4, 5.0])


def _scaled(x: np.ndarray) -> tuple[float, np.ndarray]:
    z = x / SCALES
    return -0.5 * float(z @ z), -z / SCALES


def _draws(fn: object, dim: int, **options: object) -> np.ndarray:
    runs = sample_chains(
        fn,  # type: ignore[arg-type]
        dim,
        algorithm="mala",
        chains=4,
        iterations=3000,
        warmup=1000,
        seed=7,
        options=options,
        warn=False,
    )
    return np.stack([r.draws[1000:] for r in runs])


def test_exact_on_a_gaussian_whose_scales_span_eight_orders() -> None:
    # The metric from positions and gradients (gradient_warmup.MetricWindow) finds every
    # scale in the first window: ESS is over 2000 of 12000 draws in each coordinate.
    # Tolerances: the mean within 5 MCSE; the sd within 6 % (its relative standard
    # error is about 1 / sqrt(2 ESS) < 1.6 %).
    draws = _draws(_scaled, 4)
    for i, scale in enumerate(SCALES):
        x = draws[:, :, i]
        ess = ess_bulk(x)
        assert ess > 2000, (i, ess)
        assert abs(x.mean()) < 5 * x.std() / math.sqrt(ess), i
        assert x.std() / scale == pytest.approx(1.0, rel=0.06), i


def test_a_dense_metric_learns_a_correlated_target() -> None:
    cov = np.array([[1.0, 9.5], [9.5, 100.0]])  # correlation 0.95, scales 1 and 10
    prec = np.linalg.inv(cov)
    draws = _draws(lambda x: (-0.5 * float(x @ prec @ x), -(prec @ x)), 2, metric="dense")
    got = np.cov(draws.reshape(-1, 2).T)
    # ESS is over 1500 here: the covariance's entries within 10 %.
    np.testing.assert_allclose(got, cov, rtol=0.1)


def test_a_wrong_gradient_is_caught_and_named() -> None:
    def wrong(x: np.ndarray) -> tuple[float, np.ndarray]:
        return -0.5 * float(x @ x), -x * np.array([1.0, 1.0, 2.0])

    with pytest.raises(GradientMismatch, match=r"coordinate 2: it is .* but finite"):
        sample_chains(wrong, 3, algorithm="mala", chains=1, iterations=10, warmup=5, seed=1)


def test_a_right_gradient_passes_the_check_in_two_evaluations_per_coordinate() -> None:
    def banana(x: np.ndarray) -> tuple[float, np.ndarray]:
        b = x[1] - 0.5 * x[0] ** 2
        value = -0.5 * float(x[0] ** 2 + b**2 + x[2] ** 2)
        return value, np.array([-x[0] + b * x[0], -b, -x[2]])

    (run,) = sample_chains(banana, 3, algorithm="mala", chains=1, iterations=5, warmup=5, seed=1)
    # 1 initial point, 2 per coordinate for the check, 10 transitions (5 of warm-up).
    assert run.state.evaluations == 1 + 6 + 10
    assert run.state.check.pending is False and run.state.check.unchecked == 0


def test_gradients_that_do_not_fit_are_refused_and_change_nothing() -> None:
    params = mala.make_params(3, {"gradient_check": 0}, warmup=10)
    state = mala.init(np.zeros(3), params, seed=0, chain=0)
    proposal = mala.ask(state, params)
    with pytest.raises(ValueError, match="3 values"):
        mala.tell_gradient(state, params, proposal, 0.0, np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        mala.tell_gradient(state, params, proposal, 0.0, np.array([0.0, math.nan, 0.0]))
    with pytest.raises(ValueError, match="needs the gradient"):
        tell_one(SAMPLERS["mala"], state, params, proposal, 0.0)
    state, _ = mala.tell_gradient(state, params, proposal, 0.0, np.zeros(3))
    # Outside the support: rejected whatever the gradient says.
    proposal = mala.ask(state, params)
    new, info = mala.tell_gradient(state, params, proposal, -math.inf, np.full(3, math.nan))
    assert info.outcome == "rejected"
    assert new.position.tolist() == [0.0, 0.0, 0.0] and new.gradient.tolist() == [0.0] * 3
