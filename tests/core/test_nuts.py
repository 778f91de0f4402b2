"""NUTS (:mod:`core.samplers.nuts`): exactness, determinism, the tree between two
evaluations, the gradient check, divergences, told gradients that are wrong, and the
tree's depth and energy."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kameleon.core.diagnostics.summary import ess_mean, mcse_mean
from kameleon.core.gradients.check import GradientMismatch
from kameleon.core.interface.chain import Proposal, StepInfo
from kameleon.core.interface.documents import decode, encode
from kameleon.core.interface.sampler import OptionError
from kameleon.core.running.chains import Runner
from kameleon.core.running.inprocess import run_chain
from kameleon.core.samplers import hmc, nuts

Fn = Callable[[Any], tuple[float, Any]]


def gaussian(mean: Any, covariance: Any) -> Fn:
    mu = np.asarray(mean, dtype=float)
    precision = np.linalg.inv(np.asarray(covariance, dtype=float))

    def f(x: Any) -> tuple[float, Any]:
        r = np.asarray(x) - mu
        g = -precision @ r
        return 0.5 * float(r @ g), g

    return f


def banana(v: Any) -> tuple[float, Any]:
    """``x ~ N(0, 1)``, ``y | x ~ N(x^2, 1)``: ``E y = 1``, ``E y^2 = 4``."""
    x, y = v
    r = y - x * x
    return -0.5 * x * x - 0.5 * r * r, np.array([-x + 2 * x * r, -r])


def drive(
    params: nuts.Params, f: Fn, state: nuts.State, evaluations: int
) -> tuple[nuts.State, list[tuple[Proposal, StepInfo]]]:
    log = []
    for _ in range(evaluations):
        proposal = nuts.ask(state, params)
        value, gradient = f(proposal.position)
        state, info = nuts.tell_gradient(state, params, proposal, value, gradient)
        log.append((proposal, info))
    return state, log


def transitions(params: nuts.Params, f: Fn, state: nuts.State, n: int) -> list[nuts.State]:
    """The states after each of ``n`` transitions."""
    out = []
    while len(out) < n:
        proposal = nuts.ask(state, params)
        value, gradient = f(proposal.position)
        state, info = nuts.tell_gradient(state, params, proposal, value, gradient)
        if info.outcome in ("accepted", "rejected"):
            out.append(state)
    return out


def z_scores(values: Any, expected: Any) -> Any:
    """Each column's mean minus ``expected``, in Monte Carlo standard errors."""
    v = np.asarray(values)
    return np.array(
        [(v[:, i].mean() - expected[i]) / mcse_mean(v[None, :, i]) for i in range(v.shape[1])]
    )


# --------------------------------------------------------------------------- exactness

CORRELATED = (np.array([1.0, -2.0]), np.array([[1.0, 2.7], [2.7, 9.0]]))  # rho 0.9
SCALES = np.array([1e-3, 1e3, 1.0, 2.0, 5.0, 0.1, 10.0, 0.5, 3.0, 0.01])
WIDE = (np.zeros(10), np.diag(SCALES**2))


@pytest.mark.parametrize(
    ("target", "metric"),
    [(CORRELATED, "dense"), (WIDE, "diag")],
    ids=["2d-rho0.9-dense", "10d-scales-1e-3-to-1e3"],
)
def test_exact_on_gaussians(target: Any, metric: str) -> None:
    mean, cov = target
    d = mean.size
    params = nuts.make_params(d, {"metric": metric}, warmup=400)
    start = mean + 0.5 * np.sqrt(np.diag(cov))
    result = run_chain(nuts.SAMPLER, params, gaussian(mean, cov), start, 2400, seed=3, chain=0)
    draws = result.draws[400:]
    u = np.linalg.solve(np.linalg.cholesky(cov), (draws - mean).T).T  # whitened
    # Means (0) and the whitened squares' means (1: the variances) within 5 Monte Carlo
    # standard errors; the variances themselves within 15 % (measured: within 6 %).
    assert np.all(np.abs(z_scores(u, np.zeros(d))) < 5)
    assert np.all(np.abs(z_scores(u**2, np.ones(d))) < 5)
    assert np.allclose(np.var(draws, axis=0) / np.diag(cov), 1.0, atol=0.15)
    assert result.state.divergences == 0


def test_exact_on_a_banana_with_a_fixed_step() -> None:
    # A fixed small step: no divergence, so no bias from the tails cut off.
    params = nuts.make_params(
        2, {"step_size": 0.2, "adapt_step_size": False, "adapt_metric": False}, warmup=0
    )
    result = run_chain(nuts.SAMPLER, params, banana, np.array([0.1, 0.2]), 3000, seed=2, chain=0)
    d = result.draws
    stats = np.column_stack([d[:, 0], d[:, 1], d[:, 0] ** 2, d[:, 1] ** 2])
    assert np.all(np.abs(z_scores(stats, [0.0, 1.0, 1.0, 4.0])) < 5)
    assert result.state.divergences == 0


# --------------------------------------------------------------------------- determinism


def test_same_told_values_give_the_same_proposals_bit_for_bit() -> None:
    params = nuts.make_params(2, {"metric": "dense"}, warmup=60)
    f = gaussian(*CORRELATED)
    runs = []
    for _ in range(2):
        state = nuts.init(np.array([0.3, 0.1]), params, seed=11, chain=0)
        _, log = drive(params, f, state, 1500)
        runs.append([(p.iteration, p.kind, p.step, p.position.tobytes()) for p, _ in log])
    assert runs[0] == runs[1]


def test_asking_twice_gives_the_same_point_and_every_tree_point_is_leapfrog() -> None:
    params = nuts.make_params(2, {"step_size": 0.3, "adapt_step_size": False}, warmup=10)
    f = gaussian(*CORRELATED)
    state = nuts.init(np.array([0.3, 0.1]), params, seed=1, chain=0)
    log = []
    for _ in range(300):
        a, b = nuts.ask(state, params), nuts.ask(state, params)
        assert (a.iteration, a.kind, a.step) == (b.iteration, b.kind, b.step)
        assert a.position.tobytes() == b.position.tobytes()
        value, gradient = f(a.position)
        new, info = nuts.tell_gradient(state, params, a, value, gradient)
        if info.outcome in ("accepted", "rejected"):
            # A transition's end: the tree's size and the draw's bookkeeping.
            assert new.trajectory.points == 0 and new.n_steps >= 1
            assert new.n_steps <= 2**new.tree_depth - 1
            assert (info.outcome == "accepted") == (new.accepted == state.accepted + 1)
            assert 0.0 <= info.acceptance_probability <= 1.0
        log.append((a, info))
        state = new
    kinds = {p.kind for p, _ in log}
    assert kinds == {"init", "gradient_check", "leapfrog"}
    # Steps count the transition's evaluations: 0, 1, 2, ... then 0 after each draw.
    step = 0
    for proposal, info in log[1:]:
        assert proposal.step == step
        step = step + 1 if info.outcome == "step" else 0


def test_a_state_round_trips_through_the_codec_mid_tree() -> None:
    params = nuts.make_params(2, {"metric": "dense"}, warmup=100)
    f = gaussian(*CORRELATED)
    state = nuts.init(np.array([0.3, 0.1]), params, seed=5, chain=2)
    state, _ = drive(params, f, state, 700)
    while state.trajectory.points == 0 or state.trajectory.depth < 2 or state.trajectory.leaf < 1:
        state, _ = drive(params, f, state, 1)
    hot, cold = encode(state)
    copy = decode(json.loads(json.dumps(hot)), json.loads(json.dumps(cold)))
    assert isinstance(copy, nuts.State) and isinstance(copy.trajectory, nuts.Trajectory)
    a, log_a = drive(params, f, state, 500)
    b, log_b = drive(params, f, copy, 500)
    assert [p.position.tobytes() for p, _ in log_a] == [p.position.tobytes() for p, _ in log_b]
    assert encode(a) == encode(b)
    # The tree in progress is bounded: a subtree of depth j stores at most j checkpoints
    # (one for the first subtree), never more than max_tree_depth, and a finished tree none.
    tree = state.trajectory
    for ckpt in (tree.checkpoint_momentum, tree.checkpoint_sum, tree.checkpoint_previous):
        assert 1 <= ckpt.shape[0] <= max(tree.depth, 1) <= params.max_tree_depth
        assert ckpt.shape[1] == 2
    while state.trajectory.points:
        state, _ = drive(params, f, state, 1)
    assert state.trajectory.checkpoint_momentum.shape == (0, 2)


def test_checkpoint_ranges() -> None:
    # Leaf n stores (even) or closes (odd) the subtrees from these checkpoints.
    assert [nuts.checkpoint_range(n) for n in range(8)] == [
        (1, 0),
        (0, 0),
        (2, 1),
        (0, 1),
        (2, 1),
        (1, 1),
        (3, 2),
        (0, 2),
    ]


# --------------------------------------------------------------------------- told values


def test_a_wrong_gradient_stops_the_chain_at_the_check_naming_the_coordinate() -> None:
    f = gaussian(np.zeros(3), np.eye(3))

    def wrong(x: Any) -> tuple[float, Any]:
        value, g = f(x)
        g = g.copy()
        g[2] = -g[2]
        return value, g

    params = nuts.make_params(3, {}, warmup=10)
    with pytest.raises(GradientMismatch, match="coordinate 2"):
        run_chain(nuts.SAMPLER, params, wrong, np.ones(3), 5, seed=0, chain=0)


def test_bad_told_gradients_are_value_errors_and_leave_the_state_as_it_was() -> None:
    params = nuts.make_params(2, {"gradient_check": 0}, warmup=10)
    f = gaussian(*CORRELATED)
    state = nuts.init(np.array([0.3, 0.1]), params, seed=1, chain=0)
    state, _ = drive(params, f, state, 3)
    before = encode(state)
    proposal = nuts.ask(state, params)
    value, _ = f(proposal.position)
    for gradient, message in [
        (np.zeros(1), r"shape \(2,\)"),
        (np.array([math.nan, 0.0]), "coordinate 0"),
        (np.zeros((2, 1)), r"shape \(2,\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            nuts.tell_gradient(state, params, proposal, value, gradient)
    with pytest.raises(ValueError, match="log density"):
        nuts.tell_gradient(state, params, proposal, math.inf, np.zeros(2))
    with pytest.raises(ValueError, match="needs the gradient"):
        nuts.tell(state, params, proposal, value)
    wrong_kind = Proposal(proposal.iteration, "proposal", proposal.position, 0.0, proposal.step)
    with pytest.raises(ValueError, match="does not belong"):
        nuts.tell_gradient(state, params, wrong_kind, value, np.zeros(2))
    assert encode(state) == before


def test_a_huge_step_size_diverges_at_once_and_the_chain_stays_put() -> None:
    params = nuts.make_params(
        2, {"step_size": 1e3, "adapt_step_size": False, "gradient_check": 0}, warmup=0
    )
    f = gaussian(*CORRELATED)
    start = np.array([0.3, 0.1])
    state = nuts.init(start, params, seed=0, chain=0)
    state, log = drive(params, f, state, 21)
    ends = [i for _, i in log[1:]]
    assert all(i.outcome == "rejected" and i.acceptance_probability == 0.0 for i in ends)
    assert state.iteration == 20 and state.divergences == 20 and state.diverging
    assert (state.n_steps, state.tree_depth) == (1, 1)
    assert np.array_equal(state.position, start)


def test_a_cliff_is_a_divergence_and_never_crossed() -> None:
    f = gaussian(np.zeros(2), np.eye(2))

    def cliff(x: Any) -> tuple[float, Any]:
        return (-math.inf, np.full(2, math.nan)) if x[0] > 0.5 else f(x)

    params = nuts.make_params(2, {"gradient_check": 0}, warmup=100)
    result = run_chain(nuts.SAMPLER, params, cliff, np.zeros(2), 600, seed=2, chain=0)
    assert np.all(result.draws[:, 0] <= 0.5)
    assert result.state.divergences > 0
    diverged = [
        s for s in transitions(params, cliff, result.state, 200) if s.diverging
    ]  # after warm-up: counted
    assert diverged and diverged[-1].divergences >= len(diverged)


def test_an_overflowing_trajectory_is_never_handed_out() -> None:
    params = nuts.make_params(
        2, {"step_size": 1e300, "adapt_step_size": False, "gradient_check": 0}, warmup=0
    )
    f = gaussian(np.zeros(2), np.eye(2))
    start = np.array([3.0, -2.0])
    state, log = drive(params, f, nuts.init(start, params, seed=0, chain=0), 6)
    assert all(np.all(np.isfinite(p.position)) for p, _ in log)
    assert state.divergences == 5 and np.array_equal(state.position, start)


def test_options_are_checked() -> None:
    for options in ({"max_tree_depth": 0}, {"max_tree_depth": 31}, {"step_size": 0.0}):
        with pytest.raises(OptionError):
            nuts.make_params(2, options, warmup=10)


# --------------------------------------------------------------------------- the tree


def test_the_tree_stops_at_max_tree_depth() -> None:
    params = nuts.make_params(
        2, {"step_size": 1e-3, "adapt_step_size": False, "max_tree_depth": 4}, warmup=0
    )
    states = transitions(params, gaussian(np.zeros(2), np.eye(2)), nuts.init(
        np.ones(2), params, seed=0, chain=0
    ), 5)  # fmt: skip
    assert all((s.tree_depth, s.n_steps) == (4, 15) for s in states)


def test_tree_depth_grows_with_the_condition_number() -> None:
    depths = []
    for ratio in (1.0, 10.0, 100.0):
        cov = np.diag([1.0, ratio**2])
        params = nuts.make_params(
            2, {"adapt_metric": False, "gradient_check": 0, "metric": "unit"}, warmup=150
        )
        states = transitions(params, gaussian(np.zeros(2), cov), nuts.init(
            np.ones(2), params, seed=4, chain=0
        ), 450)[150:]  # fmt: skip
        depths.append(np.mean([s.tree_depth for s in states]))
    assert depths[0] < depths[1] - 1 < depths[2] - 2, depths


def test_energy_is_recorded_and_its_bfmi_is_near_one_on_a_gaussian() -> None:
    params = nuts.make_params(10, {"gradient_check": 0}, warmup=300)
    f = gaussian(np.zeros(10), np.eye(10))
    states = transitions(params, f, nuts.init(np.ones(10), params, seed=6, chain=0), 1300)[300:]
    energy = np.array([s.energy for s in states])
    logp = np.array([s.logdensity for s in states])
    assert np.all(energy >= -logp)  # H = -log p + K, K >= 0
    e_bfmi = np.sum(np.diff(energy) ** 2) / np.sum((energy - energy.mean()) ** 2)
    # E-BFMI of a Gaussian is about 1 (Stan warns below 0.3).
    assert 0.6 < e_bfmi < 1.6, e_bfmi


def test_ess_per_gradient_against_hmc_on_a_10d_gaussian() -> None:
    """Reported (``pytest -s``), not a race: both samplers, same target (scales 1 to
    10), same warm-up; the smallest ESS over the coordinates, per gradient after it."""
    scales = np.linspace(1.0, 10.0, 10)
    f = gaussian(np.zeros(10), np.diag(scales**2))
    start = 0.5 * scales
    report = {}
    for module in (nuts, hmc):
        params = module.make_params(10, {}, warmup=400)
        runner = Runner(module.SAMPLER, params, f, start, 1400, seed=8, chain=0)
        runner.advance(400)
        warm = runner.state.evaluations
        runner.advance(1000)
        after = runner.state.evaluations - warm
        u = runner.result().draws[400:] / scales
        ess = min(ess_mean(u[None, :, i]) for i in range(10))
        ess_sq = min(ess_mean(u[None, :, i] ** 2) for i in range(10))
        report[module.NAME] = (ess / after, ess_sq / after, after / 1000)
    print("min ESS per gradient (mean, square), gradients per draw:", report)
    assert all(v[0] > 0.005 and v[1] > 0.002 for v in report.values()), report


def test_replay_through_the_codec_at_every_evaluation_is_bit_for_bit() -> None:
    # As a service that stores the state between two requests: each state decoded
    # from its JSON before the next ask and tell.
    params = nuts.make_params(3, {}, warmup=50)
    f = gaussian(np.zeros(3), np.diag([1.0, 4.0, 0.25]))
    start = np.array([0.5, -1.0, 0.2])
    direct, log = drive(params, f, nuts.init(start, params, seed=9, chain=0), 800)
    state = nuts.init(start, params, seed=9, chain=0)
    for proposal, _ in log:
        hot, cold = encode(state)
        state = decode(json.loads(json.dumps(hot)), json.loads(json.dumps(cold)))
        again = nuts.ask(state, params)
        assert again.position.tobytes() == proposal.position.tobytes()
        value, gradient = f(again.position)
        state, _ = nuts.tell_gradient(state, params, again, value, gradient)
    assert encode(state) == encode(direct)
