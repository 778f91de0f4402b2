"""The kernel samplers' preconditioning (core.tuning.preconditioning): every Hastings-ratio term
in the user's coordinates, the schedule of the scouting phase, and the results that must
not depend on the units of the coordinates."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from kameleon.core.interface.chain import frozen_array
from kameleon.core.kernels.rkhs import median_bandwidth
from kameleon.core.running.inprocess import run_chain, sample
from kameleon.core.samplers import kameleon, kmc_finite, kmc_lite
from kameleon.core.tuning import preconditioning
from kameleon.core.tuning.preconditioning import Preconditioner
from tests.core.test_kameleon import explicit_covariance

KERNEL_SAMPLERS = {
    "kameleon": kameleon.SAMPLER,
    "kmc-lite": kmc_lite.SAMPLER,
    "kmc-finite": kmc_finite.SAMPLER,
}


def _dense_preconditioner(dim: int, rng: np.random.Generator) -> Preconditioner:
    """A preconditioner with a far-from-identity lower factor: scales 0.1 to 10 and
    correlations."""
    L = np.tril(rng.standard_normal((dim, dim)), -1)
    L[np.diag_indices(dim)] = np.logspace(-1, 1, dim)
    return Preconditioner(frozen_array(rng.standard_normal(dim) * 5), frozen_array(L))


def _preconditioned_kameleon(
    dim: int, n: int, seed: int
) -> tuple[kameleon.State, kameleon.Params, Preconditioner]:
    """A KAMH chain past scouting, with a random subsample in whitened coordinates."""
    rng = np.random.default_rng(seed)
    params = kameleon.make_params(
        dim,
        {
            "subsample_size": n,
            "min_subsample": 2,
            "precondition_iterations": 4,
            "random_walk_probability": 0.0,
        },
        warmup=10,
    )
    pre = _dense_preconditioner(dim, rng)
    Z = frozen_array(rng.standard_normal((n, dim)) * 2.0)
    state = dataclasses.replace(
        kameleon.init(pre.color(rng.standard_normal(dim)), params, seed=seed, chain=0),
        logdensity=-1.0,
        iteration=20,  # past scouting and warm-up: nothing adapts
        log_nu2=math.log(0.7),
        reservoir=Z,
        history_size=n,
        bandwidth=median_bandwidth(Z),
        preconditioner=pre,
    )
    return state, params, pre


def _log_q_x(
    to: np.ndarray,
    frm: np.ndarray,
    state: kameleon.State,
    pre: Preconditioner,
    nu2: float,
    gamma: float,
) -> float:
    """``log q_x(to | frm)`` computed directly in the user's coordinates: the density of
    ``x* = m + L u*`` with ``u* ~ N(W(frm), R_u(W(frm)))`` is ``N(frm, L R_u L^T)``."""
    u = np.linalg.solve(pre.factor, frm - pre.shift)
    R_u = explicit_covariance(u, state.reservoir, state.bandwidth or 1.0, gamma, nu2)
    L = pre.factor
    return float(stats.multivariate_normal(frm, L @ R_u @ L.T).logpdf(to))


@pytest.mark.parametrize(("dim", "n"), [(3, 20), (8, 3)])  # Cholesky and Woodbury branches
def test_log_correction_is_the_hastings_ratio_in_the_users_coordinates(dim: int, n: int) -> None:
    for seed in range(10):  # random pairs (x, x*)
        state, params, pre = _preconditioned_kameleon(dim, n, seed)
        proposal = kameleon.ask(state, params)
        x, x_new = np.asarray(state.position), np.asarray(proposal.position)
        # The nugget of the whitened coordinates, 0.5 * 2.38 / sqrt(dim) (kameleon.Params).
        gamma = params.nugget
        assert gamma == pytest.approx(0.5 * 2.38 / math.sqrt(dim))
        expected = _log_q_x(x, x_new, state, pre, 0.7, gamma) - _log_q_x(
            x_new, x, state, pre, 0.7, gamma
        )
        assert proposal.log_correction == pytest.approx(expected, rel=1e-7, abs=1e-7)


def test_the_proposal_density_in_the_users_coordinates_integrates_to_one() -> None:
    # 2-d, on a grid wide enough for the proposal's mass: the Jacobian of the colouring
    # map is in the density (a density without it would integrate to det L = 0.05).
    state, _, _ = _preconditioned_kameleon(2, 20, seed=3)
    pre = Preconditioner(frozen_array([1.0, -2.0]), frozen_array([[0.1, 0.0], [0.3, 0.5]]))
    state = dataclasses.replace(state, preconditioner=pre)
    x = np.asarray(state.position)
    u = np.linalg.solve(pre.factor, x - pre.shift)
    R_x = pre.factor @ explicit_covariance(u, state.reservoir, state.bandwidth or 1.0, 0.2, 0.7)
    R_x = R_x @ pre.factor.T
    half = 8 * np.sqrt(np.diag(R_x))
    g0 = np.linspace(x[0] - half[0], x[0] + half[0], 801)
    g1 = np.linspace(x[1] - half[1], x[1] + half[1], 801)
    X0, X1 = np.meshgrid(g0, g1, indexing="ij")
    points = np.stack([X0.ravel(), X1.ravel()], axis=1)
    u_points = np.linalg.solve(pre.factor, (points - pre.shift).T).T
    density_u = stats.multivariate_normal(
        u, np.linalg.inv(pre.factor) @ R_x @ np.linalg.inv(pre.factor).T
    )
    q_x = density_u.pdf(u_points) / abs(np.linalg.det(pre.factor))
    total = float(q_x.sum() * (g0[1] - g0[0]) * (g1[1] - g1[0]))
    assert total == pytest.approx(1.0, abs=1e-3)  # grid error of the Riemann sum


@pytest.mark.parametrize("name", sorted(KERNEL_SAMPLERS))
def test_scouting_is_a_symmetric_random_walk_and_ends_with_a_fixed_map(name: str) -> None:
    sampler = KERNEL_SAMPLERS[name]
    params = sampler.make_params(3, {}, warmup=200)
    assert preconditioning.scouting_iterations(params) == 100
    result = run_chain(
        sampler, params, lambda x: -0.5 * float(x @ x), np.ones(3), 260, seed=1, chain=0
    )
    state = result.state
    assert state.preconditioner is not None
    # Replaying: during scouting every proposal has no correction; the map appears at
    # iteration 100 and is the same object from then on.
    s = sampler.init(np.ones(3), params, seed=1, chain=0)
    first = sampler.ask(s, params)
    s, _ = sampler.tell(s, params, first, -1.5)
    seen = None
    for t in range(1, 261):
        proposal = sampler.ask(s, params)
        if t <= 100:
            assert proposal.log_correction == 0.0 and s.preconditioner is None
        s, _ = sampler.tell(
            s, params, proposal, -0.5 * float(proposal.position @ proposal.position)
        )
        if t >= 100:
            seen = seen or s.preconditioner
            assert s.preconditioner is seen
    assert np.all(np.diag(state.preconditioner.factor) > 0)


@pytest.mark.parametrize("name", sorted(KERNEL_SAMPLERS))
def test_none_keeps_the_papers_algorithm(name: str) -> None:
    sampler = KERNEL_SAMPLERS[name]
    params = sampler.make_params(2, {"preconditioning": "none"}, warmup=100)
    result = run_chain(
        sampler, params, lambda x: -0.5 * float(x @ x), np.ones(2), 150, seed=2, chain=0
    )
    assert result.state.preconditioner is None


def test_a_scouting_window_that_never_moved_keeps_the_last_basis() -> None:
    params = kameleon.make_params(2, {"precondition_iterations": 60}, warmup=100)
    # Everything outside the start is outside the support: every proposal is rejected.
    start = np.array([0.3, -0.2])
    result = run_chain(
        kameleon.SAMPLER,
        params,
        lambda x: 0.0 if np.array_equal(x, start) else -math.inf,
        start,
        80,
        seed=4,
        chain=0,
    )
    pre = result.state.preconditioner
    assert pre is not None and np.all(np.isfinite(pre.factor))
    assert np.all(np.diag(pre.factor) > 0)


# The failures that motivated the preconditioning: scales 1e-3 and 1e2 in one target. The
# papers' algorithms (preconditioning "none") report the wide coordinate's sd at a few
# percent of the truth; preconditioned, every kernel sampler is within 15% (4 chains x
# 2000 post-warm-up draws: the sd of an sd estimate from ESS >= 100 is under 7%, and
# this seed was not chosen to pass).
SCALES = np.array([1e-3, 1e2])


def _scaled_normal(x: np.ndarray) -> float:
    return -0.5 * float(np.sum((x / SCALES) ** 2))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KERNEL_SAMPLERS))
def test_the_result_does_not_depend_on_the_units(name: str) -> None:
    draws = sample(
        _scaled_normal,
        2,
        algorithm=name,
        chains=4,
        warmup=2000,
        iterations=2000,
        seed=1,
        warn=False,
    )
    ratio = draws.reshape(-1, 2).std(axis=0) / SCALES
    assert np.all(np.abs(ratio - 1) < 0.15), ratio


@pytest.mark.slow
def test_without_preconditioning_the_wide_coordinate_is_missed() -> None:
    # Shows that the test above can fail: the papers' KAMH on the same target and budget.
    draws = sample(
        _scaled_normal,
        2,
        algorithm="kameleon",
        chains=4,
        warmup=2000,
        iterations=2000,
        seed=1,
        options={"preconditioning": "none"},
        warn=False,
    )
    ratio = draws.reshape(-1, 2).std(axis=0) / SCALES
    assert ratio[1] < 0.5, ratio


def test_after_scouting_a_tenth_of_the_iterations_are_random_walk_steps() -> None:
    params = kmc_lite.make_params(2, {}, warmup=400)
    result = run_chain(
        kmc_lite.SAMPLER, params, lambda x: -0.5 * float(x @ x), np.ones(2), 2400, seed=6, chain=0
    )
    state = result.state
    walks = 0
    s = dataclasses.replace(state, iteration=400)  # past warm-up: the coin only
    for t in range(400, 2400):
        s = dataclasses.replace(s, iteration=t)
        if preconditioning.is_random_walk(s, params):
            walks += 1
            proposal = kmc_lite.ask(s, params)
            assert proposal.log_correction == 0.0  # symmetric
    # Binomial(2000, 0.1): mean 200, sd 13.4; 5 sd either side.
    assert abs(walks - 200) < 5 * 13.4
    last_warmup = dataclasses.replace(state, iteration=params.warmup - 1)
    assert not preconditioning.is_random_walk(last_warmup, params)


def test_rewhiten_keeps_the_points_in_the_users_coordinates() -> None:
    rng = np.random.default_rng(8)
    old, new = _dense_preconditioner(4, rng), _dense_preconditioner(4, rng)
    u = rng.standard_normal((7, 4))
    moved = preconditioning.rewhiten(u, old, new)
    x_old = np.array([old.color(row) for row in u])
    x_new = np.array([new.color(row) for row in moved])
    np.testing.assert_allclose(x_new, x_old, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(KERNEL_SAMPLERS))
def test_the_map_learns_through_warm_up_and_then_freezes(name: str) -> None:
    # Warm-up 1000: scouting ends at 500, the map is re-estimated at the ends of the
    # learning windows, between transitions, and is the same object after warm-up.
    sampler = KERNEL_SAMPLERS[name]
    params = sampler.make_params(2, {}, warmup=1000)
    ends = preconditioning.learning_window_ends(params, 2)
    assert ends == (625, 750, 875)
    s = sampler.init(np.ones(2), params, seed=2, chain=0)
    s, _ = sampler.tell(s, params, sampler.ask(s, params), -1.0)
    changes = []
    previous = None
    while s.iteration < 1300:
        proposal = sampler.ask(s, params)
        s, _ = sampler.tell(
            s, params, proposal, -0.5 * float(proposal.position @ proposal.position)
        )
        if s.preconditioner is not previous:
            changes.append(s.iteration)
            previous = s.preconditioner
    assert changes == [500, *ends]


def test_kmc_finite_carries_its_surrogate_over_to_a_new_map() -> None:
    # The features are transformed so that the surrogate is the same function of the
    # user's coordinates under the new map as under the old one.
    from kameleon.core.kernels.score_matching import FiniteSurrogate, random_features

    rng = np.random.default_rng(9)
    old, new = _dense_preconditioner(3, rng), _dense_preconditioner(3, rng)
    params = kmc_finite.make_params(3, {"num_features": 7}, warmup=100)
    omega, phase = random_features(rng, 3, 7, 1.3)
    theta = rng.standard_normal(7)
    state = dataclasses.replace(
        kmc_finite.init(np.zeros(3), params, seed=1, chain=0),
        omega=frozen_array(omega),
        phase=frozen_array(phase),
        theta=frozen_array(theta),
        preconditioner=new,
    )
    moved = kmc_finite._remap(state, params, old)
    assert moved.omega is not None and moved.phase is not None
    before = FiniteSurrogate(omega, phase, theta)
    after = FiniteSurrogate(moved.omega, moved.phase, theta)
    for x in rng.standard_normal((5, 3)) * 3:
        assert after.logdensity(new.whiten(x)) == pytest.approx(
            before.logdensity(old.whiten(x)), rel=1e-10, abs=1e-12
        )
