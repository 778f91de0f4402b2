"""The ensemble sampler: its moves term by term, emcee's half-step order, replay, and
exactness on Gaussians whose scales differ by orders of magnitude; and emcee's
autocorrelation time against an AR(1) process whose time is known."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from scipy import stats

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.assess import autocorrelation_times
from kameleon.core.diagnostics.autocorr import by_walker, integrated_time
from kameleon.core.interface.documents import decode, encode
from kameleon.core.interface.sampler import OptionError
from kameleon.core.running.inprocess import assess_results, run_chain, sample_chains
from kameleon.core.samplers import ensemble
from kameleon.core.validation.targets import Gaussian, PseudoMarginal

SAMPLER = SAMPLERS["ensemble"]
TARGET = Gaussian([0.5, -1.0, 0.0], [[1.0, 0.5, 0.0], [0.5, 2.0, 0.3], [0.0, 0.3, 0.5]])
START = np.array([0.3, -0.7, 0.2])


def _started(params: ensemble.Params, *, seed: int = 5) -> ensemble.State:
    """A chain whose walkers have all been placed and evaluated (iteration ``W - 1``)."""
    state = SAMPLER.init(START, params, seed=seed, chain=0)
    while state.logdensity is None or state.iteration < params.size - 1:
        proposal = SAMPLER.ask(state, params)
        state, _ = SAMPLER.tell(state, params, proposal, TARGET.logdensity(proposal.position))
    return state


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"walkers": 7}, "walkers"),
        ({"walkers": 2}, "walkers"),
        ({"walkers": 4}, "walkers"),  # not more than dim 5
        ({"stretch": 1.0}, "stretch"),
        ({"de_probability": 1.5}, "de_probability"),
        ({"initial_spread": 0.0}, "initial_spread"),
        ({"split": "shuffled"}, "split"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, float], option: str) -> None:
    with pytest.raises(OptionError) as excinfo:
        SAMPLER.make_params(5, options, warmup=10)
    assert excinfo.value.option == option


def test_default_walkers_are_twice_the_dimension_and_at_least_eight() -> None:
    assert SAMPLER.make_params(2, {}, warmup=0).size == 8
    assert SAMPLER.make_params(7, {}, warmup=0).size == 14


# --------------------------------------------------------------------------- moves


def test_stretch_factor_has_density_proportional_to_one_over_root_z() -> None:
    """``z`` recovered from the proposals that ``ask`` makes (the anchor walker found by
    the geometry) against the CDF of ``g(z) ∝ 1/sqrt(z)`` on ``[1/a, a]``,
    ``(sqrt(z) - 1/sqrt(a)) / (sqrt(a) - 1/sqrt(a))``, by a Kolmogorov-Smirnov test:
    2000 draws with a fixed seed, p above 0.01 (a correct sampler fails one seed in
    a hundred)."""
    a = 3.0
    params = SAMPLER.make_params(3, {"stretch": a}, warmup=0)
    state = _started(params)
    w = params.size
    anchors = state.walkers[ensemble.complementary(0, w)]
    zs = []
    for m in range(1, 2001):  # iterations m W: walker 0, with the same complement
        proposal = SAMPLER.ask(state.evolve(iteration=m * w - 1), params)
        x = state.walkers[0]
        ratios = [(proposal.position - c) / (x - c) for c in anchors]
        (z,) = [r[0] for r in ratios if np.allclose(r, r[0], rtol=1e-9)]
        # The correction is z^(d-1): (d - 1) log z, known before the point is evaluated.
        assert proposal.log_correction == pytest.approx(2 * math.log(z), rel=1e-12, abs=1e-14)
        zs.append(z)
    root = math.sqrt(a)

    def cdf(z: np.ndarray) -> np.ndarray:
        return (np.sqrt(z) - 1 / root) / (root - 1 / root)

    assert min(zs) >= 1 / a and max(zs) <= a
    assert stats.kstest(zs, cdf).pvalue > 0.01


def test_stretch_z_inverts_the_cdf_at_its_ends() -> None:
    assert ensemble.stretch_z(0.0, 2.0) == pytest.approx(0.5)
    assert ensemble.stretch_z(1.0, 2.0) == pytest.approx(2.0)


def test_acceptance_is_z_to_the_d_minus_1_times_the_density_ratio() -> None:
    params = SAMPLER.make_params(3, {}, warmup=0)
    state = _started(params)
    k = ensemble.walker_of(state.iteration + 1, params.size)
    for told in (-3.0, -5.0, -8.0):
        proposal = SAMPLER.ask(state, params)
        _, info = SAMPLER.tell(state, params, proposal, told)
        z = math.exp(proposal.log_correction / 2)
        expected = min(1.0, z**2 * math.exp(told - state.walker_logdensities[k]))
        assert info.acceptance_probability == pytest.approx(expected, rel=1e-12)


def test_differential_evolution_move_is_a_scaled_difference_of_two_other_walkers() -> None:
    params = SAMPLER.make_params(3, {"de_probability": 1.0}, warmup=0)
    state = _started(params)
    w, gamma = params.size, 2.38 / math.sqrt(6.0)
    others = state.walkers[ensemble.complementary(0, w)]
    differences = [
        gamma * (p - q) for i, p in enumerate(others) for j, q in enumerate(others) if i != j
    ]
    for m in range(1, 50):
        proposal = SAMPLER.ask(state.evolve(iteration=m * w - 1), params)
        step = proposal.position - state.walkers[0]
        gap = min(np.abs(step - d).max() for d in differences)
        assert gap < 10 * ensemble.DE_NOISE  # the noise, sd 1e-5: 10 sd is never reached
        assert proposal.log_correction == 0.0


def test_complementary_half_is_frozen_during_a_half_step() -> None:
    """emcee's order: in a half-step, walker by walker, each of the active half moves
    from the other half's positions as they were when it began, which nothing changes;
    only the walker of the transition is written, and the draw is its position."""
    params = SAMPLER.make_params(3, {"walkers": 8}, warmup=0)
    state = _started(params)
    w, half = 8, 4
    for _sweep in range(3):
        for active in (slice(0, half), slice(half, w)):
            other = ensemble.complementary(active.start, w)
            frozen = state.walkers[other].copy()
            for k in range(active.start, active.stop):
                proposal = SAMPLER.ask(state, params)
                assert ensemble.walker_of(proposal.iteration, w) == k
                if proposal.log_correction:  # a stretch move: anchored in the frozen half
                    z = math.exp(proposal.log_correction / 2)
                    anchor = (proposal.position - z * state.walkers[k]) / (1 - z)
                    assert np.abs(frozen - anchor).max(axis=1).min() < 1e-8
                before = state.walkers.copy()
                state, _ = SAMPLER.tell(
                    state, params, proposal, TARGET.logdensity(proposal.position)
                )
                changed = np.flatnonzero(np.any(state.walkers != before, axis=1))
                assert set(changed) <= {k}
                assert np.array_equal(state.walkers[other], frozen)
                assert np.array_equal(state.position, state.walkers[k])
                assert state.logdensity == state.walker_logdensities[k]


def test_a_random_split_moves_every_walker_once_a_sweep_against_the_other_half() -> None:
    """emcee's ``randomize_split``: each sweep draws its halves; slot ``s`` moves walker
    ``pi(s)`` from the positions of the other half's walkers as the half-step began;
    every walker moves once per sweep; the draw of iteration ``t`` is walker
    ``t mod W``'s position, whichever walker moved; and the halves differ from sweep
    to sweep."""
    params = SAMPLER.make_params(3, {"walkers": 8, "split": "random"}, warmup=0)
    state = _started(params)
    w, half = 8, 4
    orders = []
    for _sweep in range(4):
        order = ensemble.split_order(state, params, state.iteration + 1)
        assert order is not None and sorted(order) == list(range(w))
        orders.append(tuple(order))
        for slots in (range(half), range(half, w)):
            other = order[ensemble.complementary(slots.start, w)]
            frozen = state.walkers[other].copy()
            for slot in slots:
                proposal = SAMPLER.ask(state, params)
                t = proposal.iteration
                assert ensemble.walker_of(t, w) == slot
                assert np.array_equal(ensemble.split_order(state, params, t), order)
                k = int(order[slot])
                z = math.exp(proposal.log_correction / 2)
                anchor = (proposal.position - z * state.walkers[k]) / (1 - z)
                assert np.abs(frozen - anchor).max(axis=1).min() < 1e-8
                before = state.walkers.copy()
                state, info = SAMPLER.tell(
                    state, params, proposal, TARGET.logdensity(proposal.position)
                )
                changed = set(np.flatnonzero(np.any(state.walkers != before, axis=1)))
                assert changed == ({k} if info.outcome == "accepted" else set())
                assert np.array_equal(state.walkers[other], frozen)
                assert np.array_equal(state.position, state.walkers[slot])
                assert state.logdensity == state.walker_logdensities[slot]
    assert len(set(orders)) == len(orders)


def test_walkers_start_in_a_ball_and_one_outside_the_support_at_the_initial_point() -> None:
    params = SAMPLER.make_params(3, {"walkers": 8, "initial_spread": 0.01}, warmup=0)
    state = SAMPLER.init(START, params, seed=1, chain=0)
    state, info = SAMPLER.tell(state, params, SAMPLER.ask(state, params), -2.0)
    assert info.outcome == "initialized"
    assert np.array_equal(state.walkers[0], START)
    assert 0 < np.abs(state.walkers[1:] - START).max() < 0.01 * 6
    assert np.isnan(state.walker_logdensities[1:]).all()
    proposal = SAMPLER.ask(state, params)
    assert (proposal.iteration, proposal.kind) == (1, "proposal")
    assert np.array_equal(proposal.position, state.walkers[1])
    outside, info = SAMPLER.tell(state, params, proposal, -math.inf)
    assert info.outcome == "rejected"
    assert np.array_equal(outside.walkers[1], START) and outside.walker_logdensities[1] == -2.0
    inside, info = SAMPLER.tell(state, params, proposal, -2.5)
    assert info.outcome == "accepted" and inside.walker_logdensities[1] == -2.5


def test_codec_round_trip_mid_run() -> None:
    params = SAMPLER.make_params(3, {"de_probability": 0.3}, warmup=0)
    state = _started(params)
    for _ in range(13):
        proposal = SAMPLER.ask(state, params)
        state, _ = SAMPLER.tell(state, params, proposal, TARGET.logdensity(proposal.position))
    back = decode(*json.loads(json.dumps(encode(state))))
    assert type(back) is ensemble.State
    assert back.walkers.tobytes() == state.walkers.tobytes()
    assert back.walker_logdensities.tobytes() == state.walker_logdensities.tobytes()
    again, proposal = SAMPLER.ask(back, params), SAMPLER.ask(state, params)
    assert again.position.tobytes() == proposal.position.tobytes()
    assert again.log_correction == proposal.log_correction


def test_replay_through_sample_chains_is_bit_for_bit() -> None:
    def run() -> list[bytes]:
        results = sample_chains(
            TARGET.logdensity,
            3,
            algorithm="ensemble",
            chains=2,
            iterations=400,
            warmup=100,
            seed=3,
            options={"de_probability": 0.2},
            warn=False,
        )
        return [r.draws.tobytes() + r.logdensity.tobytes() for r in results]

    assert run() == run()


# --------------------------------------------------------------------------- exactness


def _check_moments(target: Gaussian, walkers: np.ndarray) -> None:
    """Means and variances within 4 Monte Carlo standard errors, each error from emcee's
    autocorrelation time of that quantity: ``sd(f) / sqrt(N / tau_f)`` over all ``N``
    walker draws. 4 standard errors: a false alarm is about 1 in 16 000 per
    comparison under a normal approximation, with 4 comparisons in 2 dimensions and 10
    in 5."""
    x = walkers  # (chains, sweeps, W, dim)
    n = x.shape[0] * x.shape[1] * x.shape[2]
    sd = np.sqrt(np.diag(target.covariance))
    tau = np.array(autocorrelation_times(x))
    assert np.all(n / tau > 1000), f"too few effective draws: tau {tau}"
    mean = x.mean(axis=(0, 1, 2))
    assert np.all(np.abs(mean - target.mean) < 4 * sd / np.sqrt(n / tau)), (mean, tau)
    squares = (x - target.mean) ** 2
    tau2 = np.array(autocorrelation_times(squares))
    # sd of (x - mu)^2 for a normal: sqrt(2) sigma^2.
    error = np.sqrt(2) * sd**2 / np.sqrt(n / tau2)
    assert np.all(np.abs(squares.mean(axis=(0, 1, 2)) - sd**2) < 4 * error), (squares.mean(), tau2)


def _walker_draws(
    target: Gaussian, *, warmup: int, iterations: int, **options: float | str
) -> np.ndarray:
    params = SAMPLER.make_params(target.dim, options, warmup=warmup)
    results = sample_chains(
        target.logdensity,
        target.dim,
        algorithm="ensemble",
        chains=4,
        iterations=iterations,
        warmup=warmup,
        initial=target.mean,
        seed=17,
        options=options,
        warn=False,
    )
    draws = np.stack([r.draws[warmup:] for r in results])
    return by_walker(draws, params.size, warmup + 1)


@pytest.mark.slow
def test_exact_on_a_strongly_correlated_gaussian_of_very_different_scales() -> None:
    """rho = 0.99, standard deviations 0.01 and 100: affine invariance makes it as easy
    as a standard normal for the stretch move (tau about 30 sweeps with 8 walkers),
    from a ball of 0.01 that warm-up widens by four orders of magnitude."""
    scales = np.array([0.01, 100.0])
    target = Gaussian([1.0, -50.0], np.outer(scales, scales) * np.array([[1, 0.99], [0.99, 1]]))
    walkers = _walker_draws(target, warmup=8 * 500, iterations=8 * 4000, initial_spread=0.01)
    _check_moments(target, walkers)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("de_probability", "split"), [(0.0, "fixed"), (0.5, "fixed"), (0.0, "random")]
)
def test_exact_on_a_five_dimensional_gaussian(de_probability: float, split: str) -> None:
    sd = np.array([0.5, 1.0, 1.5, 2.0, 1.0])
    target = Gaussian([0.5, -1.0, 0.0, 2.0, 1.0], np.outer(sd, sd) * (0.6 + 0.4 * np.eye(5)))
    walkers = _walker_draws(
        target, warmup=10 * 300, iterations=10 * 2500, de_probability=de_probability, split=split
    )
    _check_moments(target, walkers)


# --------------------------------------------------------------------------- autocorrelation


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_integrated_time_of_an_ar1_process(phi: float) -> None:
    """``tau = (1 + phi) / (1 - phi)`` (3 and 19) within 15%: 32 walkers of 20 000
    steps from their stationary distribution, whose estimate's own relative error is
    about ``sqrt(2 (2 M + 1) / (32 * 20 000))`` with the window ``M`` near ``5 tau``,
    under 3%; the window leaves out ``phi^M / (1 - phi)`` of the sum, under 0.1%."""
    rng = np.random.default_rng(4)
    steps, walkers = 20_000, 32
    x = np.empty((steps, walkers))
    x[0] = rng.standard_normal(walkers) / math.sqrt(1 - phi * phi)
    noise = rng.standard_normal((steps, walkers))
    for t in range(1, steps):
        x[t] = phi * x[t - 1] + noise[t]
    tau = (1 + phi) / (1 - phi)
    assert integrated_time(x) == pytest.approx(tau, rel=0.15)


def test_integrated_time_is_nan_when_undefined() -> None:
    assert math.isnan(integrated_time(np.ones((100, 4))))
    assert math.isnan(integrated_time(np.zeros((1, 4))))
    assert math.isnan(integrated_time(np.array([[0.0, 1.0], [math.nan, 2.0], [1.0, 0.0]])))


def test_by_walker_keeps_whole_sweeps_from_a_walker_0() -> None:
    w, warmup = 4, 5  # post-warm-up draws start at iteration 6: walker 2
    iterations = np.arange(warmup + 1, warmup + 1 + 23, dtype=float)
    draws = iterations[None, :, None]
    walkers = by_walker(draws, w, warmup + 1)
    assert walkers.shape == (1, 5, 4, 1)
    assert walkers[0, 0, :, 0].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert (walkers[0, :, :, 0] % w == np.arange(w)).all()


def test_short_run_warns_and_a_long_one_does_not() -> None:
    target = Gaussian([0.0, 0.0], [[1.0, 0.9], [0.9, 1.0]])
    params = SAMPLER.make_params(2, {}, warmup=800)
    findings = {}
    for sweeps in (100, 3000):
        results = sample_chains(
            target.logdensity,
            2,
            algorithm="ensemble",
            chains=2,
            iterations=8 * sweeps,
            warmup=800,
            initial=[0.0, 0.0],
            seed=2,
            warn=False,
        )
        found = assess_results(SAMPLER, params, results, ["a", "b"], 800)
        assert found.autocorrelation_time is not None
        assert all(t > 1 for t in found.autocorrelation_time)
        findings[sweeps] = [f for f in found.findings if f.code == "short_run"]
    assert {f.parameter for f in findings[100]} == {"a", "b"}
    assert findings[100][0].threshold == 50 and findings[100][0].value < 50
    assert findings[3000] == []


@pytest.mark.slow
def test_pseudo_marginal_ensemble_targets_the_true_density() -> None:
    """Told log-normal estimates (``E[W] = 1``, ``sd(log W) = 1``) of a correlated
    Gaussian: each walker keeps the estimate told when it moved there, never a new one,
    and the moments are within 4 standard errors of the truth (from the autocorrelation
    times, as in ``_check_moments``)."""
    target = Gaussian([0.0, 1.0], [[1.0, 0.5], [0.5, 2.0]])
    noisy = PseudoMarginal(target, noise_sd=1.0)
    params = SAMPLER.make_params(2, {}, warmup=8 * 300)
    runs = [
        run_chain(
            SAMPLER,
            params,
            functools.partial(noisy.logdensity, rng=np.random.default_rng([9, c])),
            target.mean,
            8 * 3300,
            seed=9,
            chain=c,
        )
        for c in range(4)
    ]
    for run in runs:
        accepted = run.accepted[1:]
        np.testing.assert_array_equal(run.logdensity[1:][accepted], run.told[1:][accepted])
        # A walker that stays keeps its value: the one recorded a sweep before.
        kept = ~accepted[8:]
        np.testing.assert_array_equal(run.logdensity[9:][kept], run.logdensity[1:-8][kept])
    draws = np.stack([run.draws[params.warmup :] for run in runs])
    _check_moments(target, by_walker(draws, params.size, params.warmup + 1))
