"""Over-dispersed starting points (:mod:`core.running.initial`) and how the in-process runner uses
them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import FloatArray
from kameleon.core.running.initial import DEFAULT_MAX_ATTEMPTS, initial_point, redraw, start_radius
from kameleon.core.running.inprocess import run_chain, sample
from tests.core.evaluations import for_sampler, options

DIM = 3


def _half_space(x: FloatArray) -> float:
    """A standard normal cut to ``x[0] >= 0``: half of the default box is outside."""
    return -0.5 * float(x @ x) if x[0] >= 0 else -math.inf


def test_initial_point_is_a_pure_function_of_seed_chain_and_attempt() -> None:
    first = initial_point(DIM, seed=7, chain=2, attempt=3)
    assert first.tobytes() == initial_point(DIM, seed=7, chain=2, attempt=3).tobytes()
    others = [
        initial_point(DIM, seed=8, chain=2, attempt=3),
        initial_point(DIM, seed=7, chain=1, attempt=3),
        initial_point(DIM, seed=7, chain=2, attempt=4),
    ]
    assert all(not np.array_equal(first, other) for other in others)
    assert not first.flags.writeable


def test_default_points_fill_the_box_minus_2_to_2() -> None:
    points = np.array([initial_point(DIM, seed=1, chain=c, attempt=0) for c in range(2000)])
    assert np.all(np.abs(points) < 2.0)
    # Uniform on (-2, 2): mean 0 and sd 4 / sqrt(12) = 1.155 per coordinate; with 2000
    # points the standard errors are 0.026 (mean) and about 0.013 (sd), so 5 of them is
    # a bound that a correct draw misses with negligible probability (fixed seed anyway).
    assert np.all(np.abs(points.mean(axis=0)) < 0.13)
    assert np.all(np.abs(points.std(axis=0) - 4 / math.sqrt(12)) < 0.065)
    # Corners too: every octant is visited.
    assert len({tuple(row) for row in (points > 0)}) == 2**DIM


def test_a_center_and_radius_shift_and_scale_the_box() -> None:
    center = np.array([10.0, -5.0, 0.5])
    points = np.array(
        [
            initial_point(DIM, seed=1, chain=c, attempt=0, center=center, radius=0.25)
            for c in range(200)
        ]
    )
    assert np.all(np.abs(points - center) < 0.25)
    assert np.abs(points - center).max() > 0.2
    plain = initial_point(DIM, seed=1, chain=5, attempt=0)
    assert np.array_equal(points[5], center + 0.25 / 2.0 * plain)
    with pytest.raises(ValueError, match="shape"):
        initial_point(DIM, seed=1, chain=0, attempt=0, center=[1.0, 2.0])


def test_start_radius() -> None:
    assert start_radius(False, None) == 2.0
    assert start_radius(True, None) is None  # a given point is used exactly
    assert start_radius(True, 0.5) == 0.5
    assert start_radius(False, 3.0) == 3.0
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="radius"):
            start_radius(False, bad)


def test_redraw_moves_to_the_next_attempt_and_stops_at_the_bound() -> None:
    rwm = SAMPLERS["rwm"]
    params = rwm.make_params(DIM, {}, warmup=0)
    state = rwm.init(initial_point(DIM, seed=3, chain=1, attempt=0), params, seed=3, chain=1)
    new = redraw(state, center=None, radius=2.0, max_attempts=3)
    assert new.epoch == 1 and new.logdensity is None
    assert np.array_equal(new.position, initial_point(DIM, seed=3, chain=1, attempt=1))
    last = redraw(new, center=None, radius=2.0, max_attempts=3)
    assert last.epoch == 2
    assert redraw(last, center=None, radius=2.0, max_attempts=3) is None  # 3 points tried
    assert redraw(state, center=None, radius=None) is None  # a given point is not replaced


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_run_chain_without_initial_starts_at_the_first_draw(name: str) -> None:
    sampler = SAMPLERS[name]
    params = sampler.make_params(DIM, options(name), warmup=0)
    result = run_chain(
        sampler,
        params,
        for_sampler(sampler, lambda x: -0.5 * float(x @ x)),
        None,
        0,
        seed=4,
        chain=2,
    )
    start = initial_point(DIM, seed=4, chain=2, attempt=0)
    assert np.array_equal(result.state.position, start)
    assert result.state.epoch == 0


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_run_chain_replaces_drawn_starts_outside_the_support(name: str) -> None:
    sampler = SAMPLERS[name]
    params = sampler.make_params(DIM, options(name), warmup=0)
    epochs = []
    for chain in range(8):
        fn = for_sampler(sampler, _half_space)
        state = run_chain(sampler, params, fn, None, 0, seed=5, chain=chain).state
        attempts = [initial_point(DIM, seed=5, chain=chain, attempt=a) for a in range(50)]
        first_inside = next(a for a, x in enumerate(attempts) if x[0] >= 0)
        assert state.epoch == first_inside
        assert np.array_equal(state.position, attempts[first_inside])
        epochs.append(state.epoch)
    assert max(epochs) > 0  # the seed exercises the redraw


def test_run_chain_gives_up_after_max_initial_attempts() -> None:
    sampler = SAMPLERS["rwm"]
    params = sampler.make_params(DIM, {}, warmup=0)
    calls = []

    def nowhere(x: FloatArray) -> float:
        calls.append(x)
        return -math.inf

    with pytest.raises(ValueError, match="after 7 drawn points"):
        run_chain(sampler, params, nowhere, None, 5, seed=0, chain=0, max_initial_attempts=7)
    assert len(calls) == 7
    assert len({c.tobytes() for c in calls}) == 7
    calls.clear()
    with pytest.raises(ValueError, match=f"after {DEFAULT_MAX_ATTEMPTS} drawn points"):
        run_chain(sampler, params, nowhere, None, 5, seed=0, chain=0)
    assert len(calls) == DEFAULT_MAX_ATTEMPTS


def test_run_chain_uses_a_given_point_exactly_or_draws_around_it() -> None:
    sampler = SAMPLERS["rwm"]
    params = sampler.make_params(DIM, {}, warmup=0)
    center = np.array([1.0, 2.0, 3.0])

    def starts(radius: float | None) -> FloatArray:
        return np.array(
            [
                run_chain(
                    sampler, params, _half_space, center, 0, seed=9, chain=c, initial_radius=radius
                ).state.position
                for c in range(3)
            ]
        )

    assert np.array_equal(starts(None), [center] * 3)
    around = starts(0.1)
    assert len({row.tobytes() for row in around}) == 3
    assert np.all(np.abs(around - center) < 0.1)


@pytest.mark.parametrize("name", ["rwm", "am"])
def test_sample_runs_the_chains_of_run_chain_from_drawn_starts(name: str) -> None:
    draws = sample(
        _half_space, DIM, algorithm=name, chains=3, iterations=20, warmup=10, seed=9, warn=False
    )
    params = SAMPLERS[name].make_params(DIM, {}, warmup=10)
    for c in range(3):
        run = run_chain(SAMPLERS[name], params, _half_space, None, 30, seed=9, chain=c)
        assert draws[c].tobytes() == run.draws[10:].tobytes()
    assert np.all(draws[:, :, 0] >= 0)


def test_sample_raises_when_every_drawn_start_is_outside() -> None:
    with pytest.raises(ValueError, match="after 4 drawn points"):
        sample(lambda x: -math.inf, DIM, algorithm="am", max_initial_attempts=4)
