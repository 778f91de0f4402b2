"""NUTS (:mod:`core.samplers.nuts`): exactness, determinism, the tree between two
evaluations, the gradient check, divergences, told gradients that are wrong, and the
tree's depth and energy."""

from __future__ import annotations

import hashlib
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


#: A chain's state as the code before trees were begun at the previous transition's end
#: wrote it (``seed`` 7, chain 1, ``x^4 / 4`` added to a standard normal's first
#: coordinate, 20 warm-up transitions): within a tree, and between two transitions (its
#: tree the finished one's); with the next proposal that code asked, and a digest of
#: the next 200 proposals' positions and the position after them.
BEFORE_BEGUN_TREES = json.loads(
    '{"within":{"hot":{"c":"nuts.State","v":{"position":{"a":"f8","s":[2],"b":"qBPjOjoU3j'
    '9IqetL9Qn1vw=="},"logdensity":-0.9871623865334969,"iteration":13,"accepted":11,"epoc'
    'h":0,"seed":7,"chain":1,"gradient":{"a":"f8","s":[2],"b":"OeNYToxc4r9IqetL9Qn1Pw=="}'
    ',"step":9,"evaluations":61,"step_size":0.10279438158833948,"tree_depth":1,"n_steps":'
    '1,"diverging":false,"divergences":0,"energy":2.5325598232530915,"trajectory":{"c":"n'
    'uts.Trajectory","v":{"left":{"c":"nuts.Point","v":{"position":{"a":"f8","s":[2],"b":'
    '"lGAFvBFS5j/LKS/OylfWvw=="},"momentum":{"a":"f8","s":[2],"b":"wkvkJdCmyr/F0JAYFWwAwA'
    '=="},"gradient":{"a":"f8","s":[2],"b":"ni59jRKX8L/LKS/OylfWPw=="},"logdensity":-0.36'
    '33824429455137,"energy":2.4920011428479456}},"right":{"c":"nuts.Point","v":{"positio'
    'n":{"a":"f8","s":[2],"b":"p4Gn4vwFxj8KMP6jmaL9vw=="},"momentum":{"a":"f8","s":[2],"b'
    '":"t39rkwYf6b/CyiOhQJfuvw=="},"gradient":{"a":"f8","s":[2],"b":"kJP64OSsxr8KMP6jmaL9'
    'Pw=="},"logdensity":-1.7303384562393735,"energy":2.4954132938915166}},"sample":{"c":'
    '"nuts.Point","v":{"position":{"a":"f8","s":[2],"b":"lGAFvBFS5j/LKS/OylfWvw=="},"mome'
    'ntum":{"a":"f8","s":[2],"b":"wkvkJdCmyr/F0JAYFWwAwA=="},"gradient":{"a":"f8","s":[2]'
    ',"b":"ni59jRKX8L/LKS/OylfWPw=="},"logdensity":-0.3633824429455137,"energy":2.4920011'
    '428479456}},"moved":true,"subtree_sample":{"c":"nuts.Point","v":{"position":{"a":"f8'
    '","s":[2],"b":"AE9BUM4d0D/b63JfA+j7vw=="},"momentum":{"a":"f8","s":[2],"b":"dzh5mq9j'
    '6L82hgoGvUDyvw=="},"gradient":{"a":"f8","s":[2],"b":"gt/xbm8j0b/b63JfA+j7Pw=="},"log'
    'density":-1.5537306263853479,"energy":2.4948995148847812}},"momentum_sum":{"a":"f8",'
    '"s":[2],"b":"P871zl1YFsCpKScEiRYwwA=="},"checkpoint_momentum":{"a":"f8","s":[2,2],"b'
    '":"dzh5mq9j6L82hgoGvUDyv5CtqnZJ79O/poC105EMAMA="},"checkpoint_sum":{"a":"f8","s":[2,'
    '2],"b":"SF6I/Hw0E8CmFjz+nUMuwLYpFBChpQ7ArpFWF4HgJ8A="},"checkpoint_previous":{"a":"f'
    '8","s":[2,2],"b":"jEB0SY5Z57+25lCkeQT1v9zv3vqJDdq/pcYMK0kD/78="},"depth":3,"leaf":2,'
    '"points":9,"energy0":2.493299055240718,"accept_sum":8.994728085776178,"log_weight":2'
    '.079845768641488,"subtree_log_weight":0.6912898644086226}}},"schema_version":1},"col'
    'd":{"check":{"c":"gradient_check.Check","v":{"pending":false,"coordinate":0,"level":'
    '0,"plus":{"f":"nan"},"previous":{"f":"nan"},"unchecked":0}},"adapt":{"c":"gradient_w'
    'armup.DualAveraging","v":{"log_step":-2.2750245812645735,"log_step_bar":-0.356754498'
    '0863603,"h_bar":0.07263793468528851,"count":13,"mu":2.962971379767665}},"metric":{"a'
    '":"f8","s":[2],"b":"AAAAAAAA8D8AAAAAAADwPw=="},"window":{"c":"gradient_warmup.Metric'
    'Window","v":{"count":10,"mean_x":{"a":"f8","s":[2],"b":"vIgbV5aBhb82o3OtPZLfvw=="},"'
    'm2_x":{"a":"f8","s":[2],"b":"PmacGJQkCUAUKViCxysrQA=="},"mean_g":{"a":"f8","s":[2],"'
    'b":"OAB7UFQlxD82o3OtPZLfPw=="},"m2_g":{"a":"f8","s":[2],"b":"bu8p8QaTJ0AUKViCxysrQA='
    '="},"outer":{"a":"f8","s":[0,0],"b":""}}}},"next":[0.09042435780157786,-1.9406791818'
    '235232],"digest":"2a72cb6cc3798935879bb24c40e31859e2b0654252a1d555c1409fe6b66adf3b"}'
    ',"between":{"hot":{"c":"nuts.State","v":{"position":{"a":"f8","s":[2],"b":"y8f42Z/aw'
    'z/AEB06rbL+Pw=="},"logdensity":-1.8527298062692361,"iteration":14,"accepted":12,"epo'
    'ch":0,"seed":7,"chain":1,"gradient":{"a":"f8","s":[2],"b":"hBygKehUxL/AEB06rbL+vw=="'
    '},"step":0,"evaluations":83,"step_size":0.19657823730095317,"tree_depth":5,"n_steps"'
    ':31,"diverging":false,"divergences":0,"energy":2.495745125217687,"trajectory":{"c":"'
    'nuts.Trajectory","v":{"left":{"c":"nuts.Point","v":{"position":{"a":"f8","s":[2],"b"'
    ':"IkxyngKSt78IoSy9PZsAQA=="},"momentum":{"a":"f8","s":[2],"b":"QmsZbXGO6T9U5kZmt+jIv'
    'w=="},"gradient":{"a":"f8","s":[2],"b":"BAFQZinFtz8IoSy9PZsAwA=="},"logdensity":-2.1'
    '58732189091648,"energy":2.4965785303982595}},"right":{"c":"nuts.Point","v":{"positio'
    'n":{"a":"f8","s":[2],"b":"BJ0uMjYg1L/Ygur7IYQAwA=="},"momentum":{"a":"f8","s":[2],"b'
    '":"1ZedUieS579eUP1dnZnSPw=="},"gradient":{"a":"f8","s":[2],"b":"4UEFTrUd1j/Ygur7IYQA'
    'QA=="},"logdensity":-2.1830063719320396,"energy":2.496521240814156}},"sample":{"c":"'
    'nuts.Point","v":{"position":{"a":"f8","s":[2],"b":"y8f42Z/awz/AEB06rbL+Pw=="},"momen'
    'tum":{"a":"f8","s":[2],"b":"6+KW2Kw86T8BEwRxmxPqvw=="},"gradient":{"a":"f8","s":[2],'
    '"b":"hBygKehUxL/AEB06rbL+vw=="},"logdensity":-1.8527298062692361,"energy":2.49574512'
    '5217687}},"moved":true,"subtree_sample":{"c":"nuts.Point","v":{"position":{"a":"f8",'
    '"s":[2],"b":"y8f42Z/awz/AEB06rbL+Pw=="},"momentum":{"a":"f8","s":[2],"b":"6+KW2Kw86T'
    '8BEwRxmxPqvw=="},"gradient":{"a":"f8","s":[2],"b":"hBygKehUxL/AEB06rbL+vw=="},"logde'
    'nsity":-1.8527298062692361,"energy":2.495745125217687}},"momentum_sum":{"a":"f8","s"'
    ':[2],"b":"UJhdXfwBAcClmw5Dxw9EwA=="},"checkpoint_momentum":{"a":"f8","s":[0,2],"b":"'
    '"},"checkpoint_sum":{"a":"f8","s":[0,2],"b":""},"checkpoint_previous":{"a":"f8","s":'
    '[0,2],"b":""},"depth":5,"leaf":0,"points":0,"energy0":2.493299055240718,"accept_sum"'
    ':30.95984404805724,"log_weight":3.4648602216993036,"subtree_log_weight":{"f":"-inf"}'
    '}}},"schema_version":1},"cold":{"check":{"c":"gradient_check.Check","v":{"pending":f'
    'alse,"coordinate":0,"level":0,"plus":{"f":"nan"},"previous":{"f":"nan"},"unchecked":'
    '0}},"adapt":{"c":"gradient_warmup.DualAveraging","v":{"log_step":-1.6266947727118488'
    ',"log_step_bar":-0.5322181927129894,"h_bar":0.061331993793754674,"count":14,"mu":2.9'
    '62971379767665}},"metric":{"a":"f8","s":[2],"b":"AAAAAAAA8D8AAAAAAADwPw=="},"window"'
    ':{"c":"gradient_warmup.MetricWindow","v":{"count":11,"mean_x":{"a":"f8","s":[2],"b":'
    '"QNhbZ6incj/rGY2IyonRvw=="},"m2_x":{"a":"f8","s":[2],"b":"t5FNa6RXCUDHV0lBwN8yQA=="}'
    ',"mean_g":{"a":"f8","s":[2],"b":"JywE0U53wD/rGY2IyonRPw=="},"m2_g":{"a":"f8","s":[2]'
    ',"b":"MCkAxpLBJ0DHV0lBwN8yQA=="},"outer":{"a":"f8","s":[0,0],"b":""}}}},"next":[0.34'
    '94546118309012,1.9924260172065362],"digest":"6a7f57dede7a5bfb55d0a46c3aced8b4355bd11'
    'bbe67bac0a21527fdb8dff231"}}'
)


def _quartic(x: Any) -> tuple[float, Any]:
    return -0.5 * float(x @ x) - 0.25 * float(x[0]) ** 4, -x - np.array([x[0] ** 3, 0.0])


@pytest.mark.parametrize("where", ["within", "between"])
def test_a_state_written_before_trees_were_begun_goes_on_with_the_same_draws(
    where: str,
) -> None:
    doc = BEFORE_BEGUN_TREES[where]
    params = nuts.make_params(2, {}, warmup=20)
    state = decode(doc["hot"], doc["cold"])
    assert state.trajectory.transition == 0  # not in the document: its default
    assert nuts.ask(state, params).position.tolist() == doc["next"]
    digest = hashlib.sha256()
    for _ in range(200):
        proposal = nuts.ask(state, params)
        digest.update(proposal.position.tobytes())
        value, gradient = _quartic(proposal.position)
        state, _ = nuts.tell_gradient(state, params, proposal, value, gradient)
    digest.update(state.position.tobytes())
    assert digest.hexdigest() == doc["digest"]


def test_a_transition_draws_its_momentum_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tree is begun when the transition before it ends (or the initial point is
    # told): its first point's ask and tell read the momentum, and draw none.
    drawn: list[int] = []
    draw = nuts.draw_momentum

    def counted(rng: Any, metric: Any) -> Any:
        drawn.append(1)
        return draw(rng, metric)

    monkeypatch.setattr(nuts, "draw_momentum", counted)
    params = nuts.make_params(2, {}, warmup=10)
    f = gaussian(np.zeros(2), np.diag([1.0, 4.0]))
    state = nuts.init(np.array([0.3, 0.1]), params, seed=2, chain=0)
    state, _ = drive(params, f, state, 300)
    while state.trajectory.points:
        state, _ = drive(params, f, state, 1)
    # One per transition ended, and the next one's, begun.
    assert len(drawn) == state.iteration + 1
    assert state.trajectory.transition == state.iteration + 1
