"""The learnt map on a target whose scales span five orders of magnitude (BENCHMARKS.md
section 4, "A regression the window weights brought").

The correlated 6-d Gaussian of the validation suite with standard deviations 1e-3 to
1e2, chains started as the service starts them (uniformly in ``(-2, 2)^6``: two thousand
standard deviations out in the narrowest coordinate). Each scouting window's covariance
is shrunk toward the previous estimate, and the first previous estimate is the guess
``initial_scale^2 I`` in the user's units. Shrunk linearly, a coordinate of variance
``1e-6`` kept a share ``prod (1 - a)`` of that unit through the windows: the map ended
scouting tens of times too wide along the narrow directions, and every kernel sampler
was wrong at a warm-up of 5 000 (R-hat 1.6 to 2.7). The variances are now shrunk in
logarithms where noise cannot explain a narrower window, along its principal directions
in the previous estimate's whitened coordinates
(:func:`core.tuning.shrinkage.shrink_ratios`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.running.initial import initial_point
from kameleon.core.tuning.preconditioning import scouting_iterations
from kameleon.core.tuning.shrinkage import noise_edges, shrink_ratios, shrunk_factor
from kameleon.core.validation import cases as validation_cases
from kameleon.core.validation.cases import cases

CASE = next(c for c in cases() if c.name == "gaussian-scales-1e-3..1e2-correlated-6d")
WARMUP = 5000


def _covariance() -> np.ndarray:
    """The case's covariance (the case keeps its log density, mean and sds): the log
    density is Gaussian, so its Hessian is ``-Sigma^-1``, which finite differences of a
    quadratic give up to rounding (in coordinates scaled by the sds, where it is well
    conditioned)."""
    sd = CASE.sd
    dim = CASE.dim
    h = np.zeros((dim, dim))
    step = 1e-2
    center = CASE.logdensity(CASE.mean)
    for i in range(dim):
        for j in range(dim):
            ei = np.zeros(dim)
            ej = np.zeros(dim)
            ei[i] = step * sd[i]
            ej[j] = step * sd[j]
            h[i, j] = (
                CASE.logdensity(CASE.mean + ei + ej)
                - CASE.logdensity(CASE.mean + ei)
                - CASE.logdensity(CASE.mean + ej)
                + center
            ) / (step * step)
    precision_scaled = -0.5 * (h + h.T)  # the precision of x / sd
    correlation = np.linalg.inv(precision_scaled)
    return correlation * np.outer(sd, sd)


def test_a_window_narrower_than_noise_explains_is_followed_in_logs() -> None:
    a = 0.5
    edges = noise_edges(2000, 4)  # 150 independent draws in 4-d: edges 0.70 and 1.37
    assert edges == pytest.approx(((1 - (4 / 150) ** 0.5) ** 2, (1 + (4 / 150) ** 0.5) ** 2))
    # One direction a millionth of the previous estimate, the others as wide: in logs.
    ratios = np.array([1e-6, 1.0, 1.1, 0.9])
    shrunk = shrink_ratios(ratios, a, edges)
    threshold = edges[0] * min(1.0, 1.1 / edges[1])
    assert shrunk[0] == pytest.approx((a * threshold + 1 - a) * (1e-6 / threshold) ** a)
    assert shrunk[0] < 1e-2  # linear would have kept 1 - a = 0.5 of the previous estimate
    assert shrunk[1:] == pytest.approx(a * ratios[1:] + 1 - a)
    # Narrower in every direction: a chain that hardly moved, not a narrower target.
    small = np.array([1.5e-6, 2e-6, 1.8e-6, 1.6e-6])
    assert shrink_ratios(small, a, edges) == pytest.approx(a * small + 1 - a)
    # A direction the window never moved in carries no evidence.
    assert shrink_ratios(np.array([1e-14, 1.0, 1.0, 1.0]), a, edges)[0] == pytest.approx(1 - a)
    # Too few draws to tell noise from a narrower target: linear.
    assert noise_edges(20, 4) == (0.0, 1.0)
    assert shrink_ratios(ratios, a, (0.0, 1.0)) == pytest.approx(a * ratios + 1 - a)


def test_the_shrinkage_does_not_depend_on_the_coordinates() -> None:
    rng = np.random.default_rng(3)
    dim = 5
    x = rng.standard_normal((40, dim)) * np.logspace(-3, 2, dim)
    window = np.cov(x.T)
    prior = np.linalg.cholesky(np.diag(np.logspace(-1, 1, dim) ** 2) + 0.1)
    transform = rng.standard_normal((dim, dim)) * np.logspace(2, -2, dim)
    edges = noise_edges(2000, dim)
    factor = shrunk_factor(window, prior, 0.7, edges)
    # The same window and previous estimate in other coordinates, u = A x.
    moved_window = transform @ window @ transform.T
    moved_prior = np.linalg.cholesky(transform @ prior @ prior.T @ transform.T)
    moved = shrunk_factor(0.5 * (moved_window + moved_window.T), moved_prior, 0.7, edges)
    expected = transform @ factor @ factor.T @ transform.T
    assert moved @ moved.T == pytest.approx(expected, rel=1e-6, abs=1e-9 * np.abs(expected).max())
    # Linear (edges None): a window + (1 - a) P.
    linear = shrunk_factor(window, prior, 0.7, None)
    assert linear @ linear.T == pytest.approx(0.7 * window + 0.3 * prior @ prior.T, rel=1e-9)


def _map_against_target(chain: int, iterations: int) -> np.ndarray:
    """The eigenvalues of the map's covariance against the target's (1 along every
    direction for a map that whitens the target) after ``iterations`` of ``kmc-lite``
    (0: at the end of scouting), a chain started as the service starts them."""
    sampler = SAMPLERS["kmc-lite"]
    params = sampler.make_params(CASE.dim, {}, warmup=WARMUP)
    start = np.random.default_rng(chain).uniform(-2.0, 2.0, CASE.dim)
    state = sampler.init(start, params, seed=1, chain=chain)
    while state.preconditioner is None or state.iteration < iterations:
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, CASE.logdensity(proposal.position))
    if not iterations:
        assert state.iteration == scouting_iterations(params)
    truth = np.linalg.cholesky(_covariance())
    relative = np.linalg.solve(truth, state.preconditioner.factor)
    return np.linalg.eigvalsh(relative @ relative.T)


@pytest.mark.parametrize("chain", range(4))
def test_scouting_learns_scales_five_orders_of_magnitude_apart(chain: int) -> None:
    eigenvalues = _map_against_target(chain, 0)
    # At the end of scouting: 1.4e-5 to 2.4 in these four chains (over chains 0..15:
    # 1.4e-5 to 2.4, twelve of sixteen above 0.05). Before, with the variances shrunk
    # linearly, 2e-8 to 170: the map's sd thirteen times the target's along a narrow
    # direction, and every kernel sampler wrong. The learning windows after scouting
    # mend a map too narrow (next test); they could not mend one too wide.
    assert eigenvalues.max() < 10, eigenvalues
    assert eigenvalues.min() > 1e-6, eigenvalues


def test_the_learning_windows_mend_the_narrowest_scouting_map() -> None:
    # Chain 2 ends scouting with the narrowest map of chains 0..15 (1.4e-5 of the
    # target's variance along one direction). At the end of warm-up, 0.15 to 1.4 (the
    # sixteen chains: 0.15 to 1.6, fourteen above 0.6).
    eigenvalues = _map_against_target(2, WARMUP)
    assert eigenvalues.min() > 0.05, eigenvalues
    assert eigenvalues.max() < 10, eigenvalues


ROTATED = next(c for c in cases() if c.name == "gaussian-scales-1e-3..1e3-rotated-4d")


@pytest.mark.parametrize("chain", range(4))
def test_scouting_learns_a_rotated_target_with_scales_six_orders_of_magnitude_apart(
    chain: int,
) -> None:
    # The suite's 4-d Gaussian with sds 1e-3..1e3 along axes rotated away from the
    # coordinates (condition number 1e12), chains started as the service starts them.
    rotation = validation_cases._rotation(4, 7)
    covariance = rotation @ np.diag(np.logspace(-3, 3, 4) ** 2) @ rotation.T
    truth = np.linalg.cholesky(0.5 * (covariance + covariance.T))
    sampler = SAMPLERS["kmc-lite"]
    params = sampler.make_params(ROTATED.dim, {}, warmup=WARMUP)
    start = initial_point(ROTATED.dim, seed=1, chain=chain, attempt=0)
    state = sampler.init(start, params, seed=1, chain=chain)
    while state.preconditioner is None:
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, ROTATED.logdensity(proposal.position))
    relative = np.linalg.solve(truth, state.preconditioner.factor)
    eigenvalues = np.linalg.eigvalsh(relative @ relative.T)
    # 0.64 to 1.22 in these four chains. With each coordinate's variance shrunk apart
    # from the correlations (linearly, or in logs), 2e-7 to 140: every kernel sampler
    # then warned with R-hat 1.3 to 3 at 4 x (5 000 + 5 000) (BENCHMARKS.md section 4).
    assert eigenvalues.min() > 0.1, eigenvalues
    assert eigenvalues.max() < 10, eigenvalues


def test_the_scouting_estimate_is_refreshed_on_its_schedule_and_kept_in_between() -> None:
    from kameleon.core.interface.documents import decode, encode
    from kameleon.core.tuning.preconditioning import refreshes
    from kameleon.core.tuning.windows import min_window

    for dim in (2, 6, 40):
        first, every = min_window(dim), max(10, dim)
        counts = [c for c in range(1, first + 4 * every + 1) if refreshes(c, dim)]
        assert counts == [first + k * every for k in range(5)]
    sampler = SAMPLERS["kmc-lite"]
    params = sampler.make_params(CASE.dim, {}, warmup=WARMUP)
    state = sampler.init(np.zeros(CASE.dim), params, seed=1, chain=0)
    seen: list[tuple[int, bytes | None]] = []
    while state.iteration < 200:
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, CASE.logdensity(proposal.position))
        running = state.scout_running
        seen.append((state.scout_moments.count, None if running is None else running.tobytes()))
    # The running estimate changes only at a refresh, and a window's end clears it.
    for (count, before), (next_count, after) in itertools.pairwise(seen):
        if after != before:
            assert refreshes(next_count, CASE.dim) or after is None, (count, next_count)
    assert any(after is not None for _, after in seen)
    # A state written before the field existed decodes (the field's default, None), and
    # goes on: its proposals use the previous window's estimate until the next refresh.
    hot, cold = encode(state)
    assert "scout_running" in cold
    cold = {k: v for k, v in cold.items() if k != "scout_running"}
    old = decode(hot, cold)
    assert old.scout_running is None
    proposal = sampler.ask(old, params)
    old, _ = sampler.tell(old, params, proposal, CASE.logdensity(proposal.position))
    assert old.iteration == state.iteration + 1
