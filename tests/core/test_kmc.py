"""Tests of kernel HMC (core.kernels.kernel_hmc, kmc_lite, kmc_finite) beyond the generic
sampler tests: the leapfrog, the proposal's randomness, the random-walk fallback, the
step-size rule and the adaptation schedule."""

from __future__ import annotations

import dataclasses
import itertools
import math
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kameleon.core.interface.documents import cold_changed
from kameleon.core.interface.sampler import OptionError
from kameleon.core.kernels import kernel_hmc
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.samplers import kmc_finite, kmc_lite

DIM = 2
Variant = tuple[ModuleType, dict[str, Any]]
# The kernel method's own mechanics, in the user's coordinates (test_preconditioning.py
# covers the scouting phase and the whitened coordinates).
SMALL = {
    "min_history": 20,
    "num_steps_min": 3,
    "num_steps_max": 8,
    "preconditioning": "none",
}
VARIANTS: dict[str, Variant] = {
    "lite": (kmc_lite, {**SMALL, "num_centres": 40, "update_every": 10}),
    "finite": (kmc_finite, {**SMALL, "num_features": 30, "update_every": 5}),
}


def logdensity(x: np.ndarray) -> float:
    return -0.5 * float(x @ x)


def started(sampler: ModuleType, params: Any, seed: int = 0) -> Any:
    state = sampler.init(np.full(DIM, 0.5), params, seed=seed, chain=1)
    proposal = sampler.ask(state, params)
    return sampler.tell(state, params, proposal, logdensity(proposal.position))[0]


def run(sampler: ModuleType, params: Any, state: Any, n: int) -> list[tuple[Any, Any, Any]]:
    """``n`` iterations from ``state``: a list of (state before, proposal, state after)."""
    out = []
    for _ in range(n):
        proposal = sampler.ask(state, params)
        new, _ = sampler.tell(state, params, proposal, logdensity(proposal.position))
        out.append((state, proposal, new))
        state = new
    return out


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> Variant:
    return VARIANTS[request.param]


# --------------------------------------------------------------------------- leapfrog


def banana_gradient(x: np.ndarray) -> np.ndarray:
    """Gradient of log N(x_0; 0, 4) N(x_1 + x_0^2 / 2; 0, 1): nonlinear."""
    r = x[1] + 0.5 * x[0] ** 2
    return np.array([-x[0] / 4 - r * x[0], -r])


def test_leapfrog_is_reversible() -> None:
    q0, p0 = np.array([0.3, -1.0]), np.array([1.1, 0.4])
    q0.flags.writeable = p0.flags.writeable = False  # and inputs are not written to
    q, p = kernel_hmc.leapfrog(q0, p0, banana_gradient, 0.07, 25)
    assert not np.allclose(q, q0)
    q_back, p_back = kernel_hmc.leapfrog(q, -p, banana_gradient, 0.07, 25)
    np.testing.assert_allclose(q_back, q0, atol=1e-12)
    np.testing.assert_allclose(-p_back, p0, atol=1e-12)


def test_leapfrog_nearly_preserves_energy_on_a_quadratic() -> None:
    A = np.array([[2.0, 0.6], [0.6, 0.5]])
    q0, p0 = np.array([1.0, -0.5]), np.array([0.3, 0.8])

    def energy(q: np.ndarray, p: np.ndarray) -> float:
        return 0.5 * float(q @ A @ q + p @ p)

    def error(step_size: float) -> float:
        # The same trajectory length, 4 time units, for each step size.
        q, p = kernel_hmc.leapfrog(q0, p0, lambda q: -A @ q, step_size, round(4 / step_size))
        return abs(energy(q, p) - energy(q0, p0))

    coarse, fine = error(0.1), error(0.05)
    assert coarse < 0.02 * energy(q0, p0)
    # Second order: halving the step divides the error by about 4.
    assert 2.5 < coarse / fine < 6


# --------------------------------------------------------------------------- proposals


def fitted(sampler: ModuleType, options: dict[str, Any]) -> tuple[Any, Any]:
    params = sampler.make_params(DIM, options, warmup=1000)
    state = run(sampler, params, started(sampler, params), options["min_history"] + 5)[-1][2]
    assert state.bandwidth is not None
    return params, state


def test_hmc_proposal_comes_from_the_proposal_stream(variant: Variant) -> None:
    sampler, options = variant
    params, state = fitted(sampler, options)
    proposal = sampler.ask(state, params)
    again = sampler.ask(state, params)
    np.testing.assert_array_equal(proposal.position, again.position)
    assert proposal.log_correction == again.log_correction
    # Momentum, step count and step size, in this order, and nothing from the state.
    rng = generator(state.seed, state.chain, state.iteration + 1, Stream.PROPOSE)
    p0 = rng.standard_normal(DIM)
    num_steps = int(rng.integers(params.num_steps_min, params.num_steps_max + 1))
    jitter = params.step_size_jitter
    step_size = math.exp(state.log_step_size) * rng.uniform(1 - jitter, 1 + jitter)
    q, p = kernel_hmc.leapfrog(
        state.position, p0, sampler._surrogate(state).gradient, step_size, num_steps
    )
    np.testing.assert_array_equal(proposal.position, q)
    assert proposal.log_correction == pytest.approx(0.5 * (p0 @ p0 - p @ p), abs=1e-12)
    assert proposal.log_correction != 0.0


def test_random_walk_until_min_history_then_hmc(variant: Variant) -> None:
    sampler, options = variant
    params = sampler.make_params(DIM, options, warmup=1000)
    steps = run(sampler, params, started(sampler, params), params.min_history + 10)
    for before, proposal, after in steps:
        t = proposal.iteration
        if t <= params.min_history:
            # Every warm-up state enters the history; the fit comes with the min_history-th.
            assert before.bandwidth is None
            assert (after.bandwidth is None) == (t < params.min_history)
            rng = generator(before.seed, before.chain, t, Stream.PROPOSE)
            step = math.exp(before.log_rw_scale) * rng.standard_normal(DIM)
            np.testing.assert_allclose(proposal.position, before.position + step, rtol=1e-15)
            assert proposal.log_correction == 0.0
        else:
            assert before.bandwidth is not None and proposal.log_correction != 0.0
    # Without a step_size option, the leapfrog starts from the random walk's scale.
    switch = steps[params.min_history - 1][2]
    assert switch.log_step_size == switch.log_rw_scale


def test_step_size_adapts_on_the_surrogate_energy_error(variant: Variant) -> None:
    sampler, options = variant
    params, state = fitted(sampler, {**options, "target_acceptance": 0.8})
    tiny = dataclasses.replace(state, log_step_size=math.log(1e-6))
    proposal = sampler.ask(tiny, params)
    # A rejection by the target (-inf) does not shrink a step that integrates the
    # surrogate exactly: the step grows by rate * (1 - 0.8).
    after, info = sampler.tell(tiny, params, proposal, -math.inf)
    assert info.outcome == "rejected"
    rate = 1 / math.sqrt(proposal.iteration)
    assert after.log_step_size == pytest.approx(tiny.log_step_size + rate * 0.2, rel=1e-6)
    huge = dataclasses.replace(state, log_step_size=math.log(1e3))
    after, _ = sampler.tell(huge, params, sampler.ask(huge, params), 0.0)
    assert after.log_step_size == pytest.approx(huge.log_step_size - rate * 0.8, rel=1e-6)


# --------------------------------------------------------------------------- schedule


def test_warmup_mode_freezes_the_surrogate_after_warmup(variant: Variant) -> None:
    sampler, options = variant
    params = sampler.make_params(DIM, options, warmup=60)
    steps = run(sampler, params, started(sampler, params), 100)
    last_warmup = steps[59][2]
    if sampler is kmc_finite:
        assert len(last_warmup.pending) == 0  # flushed into the final fit
    else:
        assert last_warmup.centres is last_warmup.reservoir  # refitted on the final reservoir
    for before, _, after in steps[60:]:
        assert not cold_changed(before, after)
        assert after.log_step_size == last_warmup.log_step_size


def test_diminishing_mode_keeps_updating_after_warmup(variant: Variant) -> None:
    sampler, options = variant
    params = sampler.make_params(DIM, {**options, "adaptation": "diminishing"}, warmup=30)
    steps = run(sampler, params, started(sampler, params, seed=3), 300)
    after_warmup = [after for _, proposal, after in steps if proposal.iteration > 30]
    surrogate_field = "alpha" if sampler is kmc_lite else "theta"
    changes = sum(
        getattr(a, surrogate_field) is not getattr(b, surrogate_field)
        for a, b in itertools.pairwise(after_warmup)
    )
    assert changes >= 2
    final = steps[-1][2]
    # Memory stays bounded however long the chain runs.
    if sampler is kmc_lite:
        assert final.reservoir.shape == (params.num_centres, DIM)
        assert final.history_size == 300
    else:
        assert final.reservoir.shape == (0, DIM)
        assert len(final.pending) < params.update_every


def test_surrogate_arrays_are_kept_between_refits(variant: Variant) -> None:
    sampler, options = variant
    params = sampler.make_params(DIM, options, warmup=1000)
    steps = run(sampler, params, started(sampler, params), 80)
    names = (
        ("centres", "alpha") if sampler is kmc_lite else ("omega", "phase", "factor", "b", "theta")
    )
    refits = 0
    for before, _, after in steps[params.min_history :]:
        kept = [getattr(after, name) is getattr(before, name) for name in names]
        if sampler is kmc_finite:  # the features never change
            assert kept[:2] == [True, True]
            kept = kept[2:]
        # The store sees an unchanged array by identity: all are kept, or all refitted.
        assert all(kept) or not any(kept)
        refits += not any(kept)
    # A refit (lite) or a fold (finite) every update_every states.
    assert refits == pytest.approx((80 - params.min_history) / params.update_every, abs=1)


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("sampler", "options"),
    [
        (kmc_lite, {"num_centres": 10, "min_history": 20}),
        (kmc_lite, {"regularization": 0.0}),
        (kmc_finite, {"num_features": 0}),
        (kmc_finite, {"update_every": 0}),
        (kmc_lite, {"num_steps_min": 5, "num_steps_max": 4}),
        (kmc_finite, {"step_size_jitter": 1.0}),
        (kmc_lite, {"bandwidth": -1.0}),
        (kmc_finite, {"target_acceptance": 1.0}),
        (kmc_lite, {"num_features": 10}),
    ],
)
def test_invalid_options_are_rejected(sampler: ModuleType, options: dict[str, Any]) -> None:
    with pytest.raises(OptionError):
        sampler.make_params(DIM, options, warmup=100)
