"""KAMH: proposal density, Hastings correction, reservoir and adaptation.

Purity, codec round trips, replay and invariance are covered for every registered
sampler by the generic tests; these are the KAMH-specific ones.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import weakref

import numpy as np
import pytest
from scipy import stats

from kameleon.core.interface.chain import FloatArray, Proposal, frozen_array
from kameleon.core.interface.documents import cold_changed, decode, encode
from kameleon.core.interface.sampler import OptionError
from kameleon.core.kernels import kamh_proposal
from kameleon.core.kernels.rkhs import median_bandwidth
from kameleon.core.samplers import kameleon
from kameleon.core.tuning.preconditioning import PRECONDITIONING_COLD_FIELDS
from kameleon.core.tuning.reservoir import reservoir_update

# The kernel method's own mechanics, in the user's coordinates (test_preconditioning.py
# covers the scouting phase and the whitened coordinates).
NONE = {"preconditioning": "none"}

# (dim, subsample size): d <= n uses the Cholesky branch, d > n the Woodbury one.
BRANCHES = {"cholesky": (3, 20), "woodbury": (8, 3)}


def explicit_covariance(
    y: FloatArray, Z: FloatArray, bandwidth: float, gamma: float, nu2: float
) -> FloatArray:
    """``R_y`` straight from its definition in the module docstring (g_i, not M)."""
    k = np.array([math.exp(-float(np.sum((z - y) ** 2)) / (2 * bandwidth**2)) for z in Z])
    g = k[:, None] * (Z - y)
    centred = g - g.mean(axis=0)
    outer_sum = np.einsum("ij,ik->jk", centred, centred)
    return gamma**2 * np.eye(y.size) + nu2 * outer_sum / len(Z)  # type: ignore[no-any-return]


def random_matrix(dim: int, n: int, seed: int) -> FloatArray:
    return np.random.default_rng(seed).standard_normal((n, dim))


def explicit_R(M: FloatArray, gamma2: float, scale2: float) -> FloatArray:
    """``gamma2 I + scale2 M^T H M`` with the centring matrix ``H`` formed explicitly."""
    n, d = M.shape
    H = np.eye(n) - np.ones((n, n)) / n
    return gamma2 * np.eye(d) + scale2 * M.T @ H @ M  # type: ignore[no-any-return]


def fitted_state(
    dim: int, n: int, *, seed: int = 0, nu2: float = 0.7
) -> tuple[kameleon.State, kameleon.Params]:
    """A chain at a random point with a fixed subsample of ``n`` points and ``nu^2``."""
    rng = np.random.default_rng(seed)
    params = kameleon.make_params(dim, {**NONE, "subsample_size": n, "min_subsample": 2}, warmup=10)
    Z = frozen_array(rng.standard_normal((n, dim)) * 2.0)
    state = dataclasses.replace(
        kameleon.init(rng.standard_normal(dim), params, seed=seed, chain=0),
        logdensity=-1.0,
        log_nu2=math.log(nu2),
        reservoir=Z,
        history_size=n,
        bandwidth=median_bandwidth(Z),
    )
    return state, params


# --------------------------------------------------------------------------- density


@pytest.mark.parametrize("branch", BRANCHES)
def test_log_density_matches_scipy(branch: str) -> None:
    dim, n = BRANCHES[branch]
    M = random_matrix(dim, n, seed=1)
    gamma2, scale2 = 0.3, 1.7
    R = explicit_R(M, gamma2, scale2)
    for r in np.random.default_rng(2).standard_normal((5, dim)) * 3:
        expected = stats.multivariate_normal(np.zeros(dim), R).logpdf(r)
        assert kameleon.log_density_cholesky(r, gamma2, scale2, M) == pytest.approx(
            expected, rel=1e-10
        )
        assert kameleon.log_density_woodbury(r, gamma2, scale2, M) == pytest.approx(
            expected, rel=1e-10
        )
        assert kameleon.proposal_log_density(r, gamma2, scale2, M) == pytest.approx(
            expected, rel=1e-10
        )


@pytest.mark.parametrize("branch", BRANCHES)
def test_dispatcher_picks_the_branch_by_min_n_d(
    branch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dim, n = BRANCHES[branch]
    other = "woodbury" if branch == "cholesky" else "cholesky"

    def forbidden(*args: object) -> float:
        raise AssertionError(f"the {other} branch was used")

    monkeypatch.setattr(kameleon, f"log_density_{other}", forbidden)
    kameleon.proposal_log_density(np.ones(dim), 0.5, 0.5, random_matrix(dim, n, seed=3))


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_density_in_the_ratio_is_the_density_sampled_from(branch: str) -> None:
    dim, n = BRANCHES[branch]
    M = random_matrix(dim, n, seed=4)
    gamma, scale2 = 0.5, 0.8
    R = explicit_R(M, gamma**2, scale2)
    rng = np.random.default_rng(5)
    N = 20_000
    draws = np.empty((N, dim))
    for i in range(N):
        draws[i], log_q = kameleon.sample_proposal(rng, gamma, scale2, M)
        if i < 20:
            expected = stats.multivariate_normal(np.zeros(dim), R).logpdf(draws[i])
            assert log_q == pytest.approx(expected, rel=1e-10)
    # Standard errors of a sample mean, sqrt(R_ii / N), and of a sample covariance
    # entry, sqrt((R_ii R_jj + R_ij^2) / N); 5 of them keep the test from ever failing
    # by chance (fixed seed) while a wrong factor of H, of scale2 or of gamma is caught.
    se_mean = np.sqrt(np.diag(R) / N)
    assert np.all(np.abs(draws.mean(axis=0)) < 5 * se_mean)
    se_cov = np.sqrt((np.outer(np.diag(R), np.diag(R)) + R**2) / N)
    assert np.all(np.abs(np.cov(draws.T) - R) < 5 * se_cov)


@pytest.mark.parametrize("branch", BRANCHES)
def test_log_correction_is_the_hastings_ratio(branch: str) -> None:
    dim, n = BRANCHES[branch]
    state, params = fitted_state(dim, n, seed=6)
    Z, bandwidth, nu2 = state.reservoir, median_bandwidth(state.reservoir), 0.7
    x = state.position
    for iteration in range(5):
        proposal = kameleon.ask(dataclasses.replace(state, iteration=iteration), params)
        x_new = proposal.position
        R_x = explicit_covariance(x, Z, bandwidth, params.nugget, nu2)
        R_new = explicit_covariance(x_new, Z, bandwidth, params.nugget, nu2)
        expected = stats.multivariate_normal(x_new, R_new).logpdf(x) - stats.multivariate_normal(
            x, R_x
        ).logpdf(x_new)
        assert proposal.log_correction == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert proposal.log_correction != 0.0


def test_ask_draws_from_the_documented_covariance() -> None:
    dim, n = BRANCHES["cholesky"]
    state, params = fitted_state(dim, n, seed=7)
    Z = state.reservoir
    R = explicit_covariance(state.position, Z, median_bandwidth(Z), params.nugget, 0.7)
    N = 4000
    steps = (
        np.array(
            [
                kameleon.ask(dataclasses.replace(state, iteration=i), params).position
                for i in range(N)
            ]
        )
        - state.position
    )
    # Covariance entries within 5 standard errors, as in the test above.
    se_cov = np.sqrt((np.outer(np.diag(R), np.diag(R)) + R**2) / N)
    assert np.all(np.abs(np.cov(steps.T) - R) < 5 * se_cov)


def test_random_walk_until_the_subsample_is_large_enough() -> None:
    params = kameleon.make_params(2, {**NONE, "min_subsample": 5}, warmup=100)
    state = kameleon.init(np.zeros(2), params, seed=1, chain=0)
    state, _ = kameleon.tell(state, params, kameleon.ask(state, params), 0.0)
    for _ in range(5):
        proposal = kameleon.ask(state, params)
        assert state.bandwidth is None
        assert proposal.log_correction == 0.0
        state, _ = kameleon.tell(state, params, proposal, 0.0)  # always accepted
    assert state.reservoir.shape == (5, 2)
    assert state.bandwidth == pytest.approx(median_bandwidth(state.reservoir))
    assert kameleon.ask(state, params).log_correction != 0.0


def test_a_fixed_bandwidth_is_used_as_given() -> None:
    params = kameleon.make_params(2, {**NONE, "min_subsample": 2, "bandwidth": 0.3}, warmup=100)
    state = kameleon.init(np.zeros(2), params, seed=1, chain=0)
    state, _ = kameleon.tell(state, params, kameleon.ask(state, params), 0.0)
    for _ in range(2):
        state, _ = kameleon.tell(state, params, kameleon.ask(state, params), 0.0)
    assert state.bandwidth == 0.3


@pytest.mark.parametrize(
    "options",
    [
        {"min_subsample": 11, "subsample_size": 10},
        {"gamma": 0.0},
        {"nu2": -1.0},
        {"adapt_start": -1},
    ],
)
def test_invalid_options_are_rejected(options: dict[str, float]) -> None:
    with pytest.raises(OptionError):
        kameleon.make_params(2, options, warmup=10)


# --------------------------------------------------------------------------- reservoir


def test_reservoir_is_a_uniform_subsample_without_replacement() -> None:
    stream, capacity, runs = 20, 5, 4000
    counts = np.zeros(stream)
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        rows = frozen_array(np.empty((0, 1)))
        for i in range(stream):
            rows = reservoir_update(rows, i, np.array([float(i)]), capacity, rng)
        assert rows.shape == (capacity, 1)
        assert len(np.unique(rows)) == capacity  # distinct items: no replacement
        counts[rows[:, 0].astype(int)] += 1
    # Each item is kept with probability 5/20: counts ~ Binomial(4000, 0.25), sd 27.4;
    # 5 sd (137) is never exceeded by chance.
    sd = math.sqrt(runs * 0.25 * 0.75)
    assert np.all(np.abs(counts - runs * 0.25) < 5 * sd)


def test_reservoir_keeps_its_array_when_nothing_changes() -> None:
    rows = frozen_array(np.arange(6.0).reshape(3, 2))
    rng = np.random.default_rng(0)
    results = [reservoir_update(rows, 1000, np.array([-1.0, -1.0]), 3, rng) for _ in range(50)]
    # A row is kept with probability 3/1001: almost every result is `rows` itself.
    assert sum(r is rows for r in results) > 40
    for r in results:
        assert not r.flags.writeable
        assert r is rows or np.sum(np.any(r != rows, axis=1)) == 1
    np.testing.assert_array_equal(rows, np.arange(6.0).reshape(3, 2))


def test_reservoir_rejects_an_inconsistent_count() -> None:
    with pytest.raises(ValueError):
        reservoir_update(
            frozen_array(np.zeros((2, 1))), 5, np.zeros(1), 3, np.random.default_rng(0)
        )


# --------------------------------------------------------------------------- adaptation


def step(state: kameleon.State, params: kameleon.Params, logdensity: float) -> kameleon.State:
    new, _ = kameleon.tell(state, params, kameleon.ask(state, params), logdensity)
    return new


def test_nu2_follows_the_acceptance_probability() -> None:
    state, params = fitted_state(2, 20, seed=8)
    assert kameleon.ask(state, params).kind == "proposal"
    # Told a much higher density: alpha = 1 > 0.234, so nu^2 grows; told -inf: it shrinks.
    assert step(state, params, 1e6).log_nu2 > state.log_nu2
    assert step(state, params, -math.inf).log_nu2 < state.log_nu2


def test_nu2_waits_for_the_kernel_part() -> None:
    params = kameleon.make_params(2, NONE, warmup=100)
    state = step(kameleon.init(np.zeros(2), params, seed=1, chain=0), params, 0.0)
    later = step(step(state, params, 0.0), params, 0.0)
    assert later.bandwidth is None and later.log_nu2 == state.log_nu2


def test_nothing_adapts_before_adapt_start() -> None:
    params = kameleon.make_params(2, {**NONE, "adapt_start": 3}, warmup=100)
    state = step(kameleon.init(np.zeros(2), params, seed=1, chain=0), params, 0.0)
    for _ in range(3):
        state = step(state, params, 0.0)
    assert state.history_size == 0
    assert step(state, params, 0.0).history_size == 1


def gaussian_logdensity(x: np.ndarray) -> float:
    return -0.5 * float(x @ x)


def run(params: kameleon.Params, iterations: int) -> list[kameleon.State]:
    state = kameleon.init(np.zeros(params.dim), params, seed=3, chain=0)
    states = [step(state, params, 0.0)]
    for _ in range(iterations):
        proposal = kameleon.ask(states[-1], params)
        states.append(
            kameleon.tell(states[-1], params, proposal, gaussian_logdensity(proposal.position))[0]
        )
    return states


def test_warmup_mode_freezes_the_subsample_and_nu2() -> None:
    params = kameleon.make_params(2, {**NONE, "subsample_size": 50}, warmup=300)
    # No preconditioning: the kernel method starts at once and Z freezes at 3/4 of warm-up.
    assert kameleon.subsample_freeze(params) == 225
    states = run(params, 400)
    during = states[1:226]
    assert any(b.log_nu2 != a.log_nu2 for a, b in itertools.pairwise(during))
    assert states[225].reservoir.shape == (50, 2) and states[225].history_size == 225
    for state in during[params.min_subsample :]:  # the median follows the reservoir
        assert state.bandwidth == pytest.approx(median_bandwidth(state.reservoir), rel=1e-12)
    final = states[225:301]  # the last quarter: Z and l fixed, nu^2 adapts against them
    assert sum(b.log_nu2 != a.log_nu2 for a, b in itertools.pairwise(final)) > 50
    for a, b in itertools.pairwise(final):
        assert b.reservoir is a.reservoir and (b.bandwidth, b.history_size) == (
            a.bandwidth,
            a.history_size,
        )
    after = states[300:]
    assert any(b.position is not a.position for a, b in itertools.pairwise(after))
    for a, b in itertools.pairwise(after):
        assert b.reservoir is a.reservoir and b.subsample is None
        assert (b.log_nu2, b.bandwidth, b.history_size) == (a.log_nu2, a.bandwidth, a.history_size)
        assert not cold_changed(a, b)  # a store writes nothing big


def test_nu2_restarts_its_gain_when_the_subsample_freezes() -> None:
    params = kameleon.make_params(2, {**NONE, "subsample_size": 50}, warmup=300)
    states = run(params, 240)
    # Iteration t of the last quarter moves log nu^2 by (t - 225)^-1/2 (alpha - target):
    # the first step of the window by the whole (alpha - target), as at the kernel
    # method's start, not by 225^-1/2 of it.
    a, b = states[225], states[226]
    proposal = kameleon.ask(a, params)
    new, info = kameleon.tell(a, params, proposal, gaussian_logdensity(proposal.position))
    assert new.log_nu2 == b.log_nu2
    assert new.log_nu2 - a.log_nu2 == pytest.approx(info.acceptance_probability - 0.234)


def test_the_default_nugget_follows_the_coordinates() -> None:
    # Whitened coordinates (unit covariance): half the optimal random walk's step.
    assert kameleon.make_params(9, {}, warmup=1000).nugget == pytest.approx(0.5 * 2.38 / 3)
    assert kameleon.make_params(9, {"preconditioning": "diagonal"}, warmup=1000).nugget == (
        pytest.approx(0.5 * 2.38 / 3)
    )
    # The user's coordinates: the reference code's 0.2; a given gamma as given.
    assert kameleon.make_params(9, NONE, warmup=1000).nugget == 0.2
    assert kameleon.make_params(9, {"precondition_iterations": 0}, warmup=1000).nugget == 0.2
    assert kameleon.make_params(9, {"gamma": 0.3}, warmup=1000).nugget == 0.3


def test_diminishing_mode_keeps_adapting_with_vanishing_probability() -> None:
    params = kameleon.make_params(
        2, {**NONE, "subsample_size": 20, "adaptation": "diminishing"}, warmup=0
    )
    T = 2000
    states = run(params, T)
    assert states[-1].history_size == T
    assert states[-1].reservoir.shape == (20, 2)
    late = [t for t in range(1001, T + 1) if states[t].log_nu2 != states[t - 1].log_nu2]
    # Iteration t adapts with probability t^-1/2: the count over (1000, 2000] has mean
    # sum_t t^-1/2 = 26.2 and sd <= sqrt(26.2) = 5.1; 5 sd either side.
    expected = sum(t**-0.5 for t in range(1001, T + 1))
    assert abs(len(late) - expected) < 5 * math.sqrt(expected)
    for t in range(1001, T + 1):
        a, b = states[t - 1], states[t]
        if b.subsample is not a.subsample:
            assert b.subsample is b.reservoir and b.log_nu2 != a.log_nu2
        else:
            assert b.bandwidth == a.bandwidth
    assert any(states[t].subsample is not states[t].reservoir for t in range(1001, T + 1))
    hot, cold = encode(states[-1])  # the separate subsample survives the codec
    assert set(cold) == {"reservoir", "subsample", *PRECONDITIONING_COLD_FIELDS}
    np.testing.assert_array_equal(decode(hot, cold).subsample, states[-1].subsample)


def test_tell_checks_the_proposal() -> None:
    state, params = fitted_state(2, 20)
    with pytest.raises(ValueError):
        kameleon.tell(state, params, Proposal(state.iteration + 2, "proposal", state.position), 0.0)


def test_remembered_factors_change_no_proposal() -> None:
    """ask gives the same proposal whether the factor at x was remembered or not."""
    from kameleon.core.validation.targets import Banana

    target = Banana(dim=3, b=0.03, v=100.0)
    params = kameleon.make_params(3, {**NONE, "subsample_size": 50}, warmup=200)
    state = kameleon.init(np.zeros(3), params, seed=4, chain=0)
    for _ in range(300):
        proposal = kameleon.ask(state, params)
        state, _ = kameleon.tell(state, params, proposal, target.logdensity(proposal.position))
    remembered = kameleon.ask(state, params)
    kamh_proposal.FACTORS.clear()
    fresh = kameleon.ask(state, params)
    np.testing.assert_array_equal(remembered.position, fresh.position)
    assert remembered.log_correction == fresh.log_correction


def test_factor_cache_stays_within_its_budget() -> None:
    cache = kamh_proposal.FactorCache(max_bytes=10 * (8 * 8 * 8 + cache_overhead()))
    Z = np.random.default_rng(0).standard_normal((20, 8))
    for i in range(50):
        cache.get(np.full(8, float(i)), Z, 2.0, 0.04, 0.1)
    assert cache.bytes <= cache.max_bytes and len(cache) == 10


def cache_overhead() -> int:
    return kamh_proposal.FactorCache.ENTRY_OVERHEAD


def test_factor_cache_keeps_no_subsample_alive() -> None:
    """An entry goes with its subsample (a chain that moved on, a deleted session): the
    cache does not hold a chain's past subsamples until the budget pushes them out."""
    cache = kamh_proposal.FactorCache(max_bytes=2**20)
    rng = np.random.default_rng(1)
    kept = rng.standard_normal((20, 8))
    for i in range(30):
        Z = rng.standard_normal((20, 8))
        first = cache.get(np.full(8, float(i)), Z, 2.0, 0.04, 0.1)
        again = cache.get(np.full(8, float(i)), Z, 2.0, 0.04, 0.1)
        assert again[0] is first[0]  # a hit while Z lives
        ref = weakref.ref(Z)
        del Z
        gc.collect()
        assert ref() is None
        assert len(cache) == 0  # its factors went with it
    cache.get(np.zeros(8), kept, 2.0, 0.04, 0.1)
    assert len(cache) == 1 and cache.bytes == 8 * 8 * 8 + cache_overhead()


def test_covariance_that_rounding_makes_indefinite_still_factors() -> None:
    """A kernel part 1e18 times the nugget: the computed R is not positive definite, and
    a jitter of 1e-12 of its mean diagonal (or more) is added."""
    M = np.random.default_rng(3).standard_normal((30, 6))
    M[:, 5] = M[:, 4] * (1 + 1e-9)  # nearly rank deficient
    L = kamh_proposal.covariance_cholesky(1e-18, 1.0, M)
    R = M.T @ M - np.outer(M.sum(0), M.sum(0) / 30)
    assert np.all(np.isfinite(L)) and np.all(np.diag(L) > 0)
    np.testing.assert_allclose(L @ L.T, R, atol=1e-8 * np.trace(R))
