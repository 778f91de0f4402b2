"""HMC (:mod:`core.samplers.hmc`): exactness, determinism, the state between two
evaluations, the gradient check, divergences and told gradients that are wrong."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kameleon.core.diagnostics.summary import mcse_mean
from kameleon.core.gradients.check import GradientMismatch
from kameleon.core.interface.chain import Proposal, StepInfo
from kameleon.core.interface.documents import decode, encode
from kameleon.core.interface.sampler import OptionError, tell_one
from kameleon.core.running.inprocess import run_chain
from kameleon.core.samplers import hmc

Fn = Callable[[Any], tuple[float, Any]]


def gaussian(mean: Any, covariance: Any) -> Fn:
    mu = np.asarray(mean, dtype=float)
    precision = np.linalg.inv(np.asarray(covariance, dtype=float))

    def f(x: Any) -> tuple[float, Any]:
        r = np.asarray(x) - mu
        g = -precision @ r
        return 0.5 * float(r @ g), g

    return f


def drive(
    params: hmc.Params, f: Fn, state: hmc.State, evaluations: int
) -> tuple[hmc.State, list[tuple[Proposal, StepInfo]]]:
    """``evaluations`` asks and tells."""
    log = []
    for _ in range(evaluations):
        proposal = hmc.ask(state, params)
        value, gradient = f(proposal.position)
        state, info = hmc.tell_gradient(state, params, proposal, value, gradient)
        log.append((proposal, info))
    return state, log


def whitened_errors(draws: Any, mean: Any, covariance: Any) -> tuple[Any, Any]:
    """The z-scores (in MCSE) of the whitened draws' means (0) and squares (1)."""
    chol = np.linalg.cholesky(np.asarray(covariance))
    u = np.linalg.solve(chol, (np.asarray(draws) - np.asarray(mean)).T).T
    z_mean = np.array([u[:, i].mean() / mcse_mean(u[None, :, i]) for i in range(u.shape[1])])
    sq = u**2
    z_var = np.array([(sq[:, i].mean() - 1) / mcse_mean(sq[None, :, i]) for i in range(u.shape[1])])
    return z_mean, z_var


# --------------------------------------------------------------------------- exactness

CORRELATED = (np.array([1.0, -2.0]), np.array([[1.0, 2.7], [2.7, 9.0]]))  # rho 0.9
SCALES = np.array([1e-3, 1e3, 1.0, 2.0, 5.0, 0.1, 10.0, 0.5, 3.0, 0.01])
WIDE = (np.zeros(10), np.diag(SCALES**2))


@pytest.mark.parametrize(
    ("target", "metric"),
    [(CORRELATED, "dense"), (CORRELATED, "diag"), (WIDE, "diag")],
    ids=["2d-rho0.9-dense", "2d-rho0.9-diag", "10d-scales-1e-3-to-1e3"],
)
def test_exact_on_gaussians(target: Any, metric: str) -> None:
    mean, cov = target
    d = mean.size
    params = hmc.make_params(d, {"metric": metric}, warmup=500)
    start = mean + 0.5 * np.sqrt(np.diag(cov))
    result = run_chain(hmc.SAMPLER, params, gaussian(mean, cov), start, 3000, seed=3, chain=0)
    draws = result.draws[500:]
    z_mean, z_var = whitened_errors(draws, mean, cov)
    # Means and variances (the whitened squares' mean) within 5 Monte Carlo standard
    # errors; the squares' MCSE is the one of their own autocorrelation.
    assert np.all(np.abs(z_mean) < 5), z_mean
    assert np.all(np.abs(z_var) < 5), z_var
    # The variances themselves within 20 % (2500 draws; measured: within 10 %).
    assert np.allclose(np.var(draws, axis=0) / np.diag(cov), 1.0, atol=0.2)
    assert result.state.divergences == 0
    assert 0.6 < result.acceptance_probability[500:].mean() <= 1.0


# --------------------------------------------------------------------------- determinism


def test_same_told_values_give_the_same_proposals_bit_for_bit() -> None:
    params = hmc.make_params(2, {"metric": "dense"}, warmup=60)
    f = gaussian(*CORRELATED)
    runs = []
    for _ in range(2):
        state = hmc.init(np.array([0.3, 0.1]), params, seed=11, chain=0)
        _, log = drive(params, f, state, 1500)
        runs.append([(p.iteration, p.kind, p.step, p.position.tobytes()) for p, _ in log])
    assert runs[0] == runs[1]
    other = hmc.init(np.array([0.3, 0.1]), params, seed=12, chain=0)
    _, log = drive(params, f, other, 40)
    assert [p.position.tobytes() for p, _ in log] != [r[3] for r in runs[0][:40]]


def test_asking_twice_gives_the_same_point_and_the_kinds_and_steps_are_in_order() -> None:
    params = hmc.make_params(
        2, {"num_steps": 5, "step_size": 0.2, "adapt_step_size": False}, warmup=10
    )
    f = gaussian(*CORRELATED)
    state = hmc.init(np.array([0.3, 0.1]), params, seed=1, chain=0)
    log = []
    for _ in range(60):
        a, b = hmc.ask(state, params), hmc.ask(state, params)
        assert (a.iteration, a.kind, a.step) == (b.iteration, b.kind, b.step)
        assert a.position.tobytes() == b.position.tobytes()
        value, gradient = f(a.position)
        state, info = hmc.tell_gradient(state, params, a, value, gradient)
        log.append((a, info))
    kinds = [p.kind for p, _ in log]
    # The initial point, the gradient check's 2 points per coordinate and level reached,
    # then trajectories of 4 leapfrog points and an end point.
    assert kinds[0] == "init"
    checks = kinds.count("gradient_check")
    assert checks >= 4 and kinds[1 : 1 + checks] == ["gradient_check"] * checks
    rest = kinds[1 + checks :]
    period = ["leapfrog"] * 4 + ["proposal"]
    assert rest[: len(rest) // 5 * 5] == period * (len(rest) // 5)
    # Steps count the transition's evaluations, check points included.
    first = [p.step for p, _ in log[1 : 1 + checks + 5]]
    assert first == list(range(checks + 5))
    assert [p.step for p, _ in log[1 + checks + 5 : 1 + checks + 10]] == list(range(5))
    outcomes = [i.outcome for _, i in log]
    assert outcomes.count("step") == checks + 4 * (len(rest) // 5) + len(rest) % 5
    assert state.evaluations == 60


def test_a_state_round_trips_through_the_codec_mid_trajectory() -> None:
    params = hmc.make_params(2, {"metric": "dense", "num_steps": 7}, warmup=100)
    f = gaussian(*CORRELATED)
    state = hmc.init(np.array([0.3, 0.1]), params, seed=5, chain=2)
    state, _ = drive(params, f, state, 333)
    while state.leapfrog != 3:
        state, _ = drive(params, f, state, 1)
    hot, cold = encode(state)
    copy = decode(json.loads(json.dumps(hot)), json.loads(json.dumps(cold)))
    assert isinstance(copy, hmc.State)
    a, log_a = drive(params, f, state, 400)
    b, log_b = drive(params, f, copy, 400)
    assert [p.position.tobytes() for p, _ in log_a] == [p.position.tobytes() for p, _ in log_b]
    assert encode(a) == encode(b)


# --------------------------------------------------------------------------- told values


def test_a_wrong_gradient_stops_the_chain_at_the_check_naming_the_coordinate() -> None:
    f = gaussian(np.zeros(3), np.eye(3))

    def wrong(x: Any) -> tuple[float, Any]:
        value, g = f(x)
        g = g.copy()
        g[1] *= 1.5
        return value, g

    params = hmc.make_params(3, {}, warmup=10)
    with pytest.raises(GradientMismatch, match="coordinate 1"):
        run_chain(hmc.SAMPLER, params, wrong, np.ones(3), 5, seed=0, chain=0)
    # A chain past the first ones is not checked.
    run_chain(hmc.SAMPLER, params, wrong, np.ones(3), 5, seed=0, chain=1)


def test_bad_told_gradients_are_value_errors_and_leave_the_state_as_it_was() -> None:
    params = hmc.make_params(2, {"gradient_check": 0}, warmup=10)
    f = gaussian(*CORRELATED)
    state = hmc.init(np.array([0.3, 0.1]), params, seed=1, chain=0)
    state, _ = drive(params, f, state, 3)  # init, two leapfrog points
    before = encode(state)
    proposal = hmc.ask(state, params)
    value, _ = f(proposal.position)
    for gradient, message in [
        (np.zeros(3), r"shape \(2,\)"),
        (np.array([0.0, math.nan]), "coordinate 1"),
        (np.array([math.inf, 0.0]), "coordinate 0"),
        ("ab", "gradient"),
    ]:
        with pytest.raises(ValueError, match=message):
            hmc.tell_gradient(state, params, proposal, value, gradient)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log density"):
        hmc.tell_gradient(state, params, proposal, math.nan, np.zeros(2))
    with pytest.raises(ValueError, match="needs the gradient"):
        hmc.tell(state, params, proposal, value)
    with pytest.raises(ValueError, match="needs the gradient"):
        tell_one(hmc.SAMPLER, state, params, proposal, value)
    stale = Proposal(proposal.iteration, proposal.kind, proposal.position, 0.0, proposal.step + 1)
    with pytest.raises(ValueError, match="does not belong"):
        hmc.tell_gradient(state, params, stale, value, np.zeros(2))
    assert encode(state) == before
    # -inf with a gradient that is not finite is fine: nothing uses it.
    new, info = hmc.tell_gradient(state, params, proposal, -math.inf, np.full(2, math.nan))
    assert info.outcome == "rejected" and new.diverging


def test_minus_infinity_at_the_initial_point_waits_for_a_new_one() -> None:
    params = hmc.make_params(2, {}, warmup=10)
    state = hmc.init(np.zeros(2), params, seed=0, chain=0)
    proposal = hmc.ask(state, params)
    new, info = hmc.tell_gradient(state, params, proposal, -math.inf, np.zeros(2))
    assert info.outcome == "outside_support" and encode(new) == encode(state)
    assert hmc.ask(new, params).kind == "init"


def test_a_huge_step_size_diverges_at_once_and_the_chain_stays_put() -> None:
    params = hmc.make_params(
        2, {"step_size": 1e3, "adapt_step_size": False, "gradient_check": 0}, warmup=0
    )
    f = gaussian(*CORRELATED)
    start = np.array([0.3, 0.1])
    state = hmc.init(start, params, seed=0, chain=0)
    state, log = drive(params, f, state, 21)  # init, then 20 transitions of 1 point each
    ends = [i for _, i in log[1:]]
    assert all(i.outcome == "rejected" and i.acceptance_probability == 0.0 for i in ends)
    assert state.iteration == 20 and state.divergences == 20 and state.diverging
    assert state.n_steps == 1 and np.array_equal(state.position, start)
    assert state.energy == pytest.approx(-state.logdensity, abs=50)  # H0 at the start


def test_a_cliff_ends_the_trajectory_as_a_divergence_without_the_points_left() -> None:
    f = gaussian(np.zeros(2), np.eye(2))

    def cliff(x: Any) -> tuple[float, Any]:
        return (-math.inf, np.full(2, math.nan)) if x[0] > 0.5 else f(x)

    params = hmc.make_params(
        2, {"step_size": 0.3, "adapt_step_size": False, "gradient_check": 0}, warmup=0
    )
    state = hmc.init(np.array([0.0, 0.0]), params, seed=2, chain=0)
    state, log = drive(params, cliff, state, 3000)
    divergent = [
        i for (p, i) in log if i.outcome == "rejected" and cliff(p.position)[0] == -math.inf
    ]
    assert divergent and state.divergences >= len(divergent)
    # A transition that met the cliff asked for fewer than its 16 points.
    counts, n = [], 0
    for _, info in log[1:]:
        n += 1
        if info.outcome != "step":
            counts.append(n)
            n = 0
    assert min(counts) < 16 and max(counts) == 16
    result = run_chain(hmc.SAMPLER, params, cliff, np.zeros(2), 200, seed=2, chain=0)
    assert np.all(result.draws[:, 0] <= 0.5)


def test_an_overflowing_trajectory_is_never_handed_out() -> None:
    params = hmc.make_params(
        2, {"step_size": 1e300, "adapt_step_size": False, "gradient_check": 0}, warmup=0
    )
    f = gaussian(np.zeros(2), np.eye(2))
    start = np.array([3.0, -2.0])
    state = hmc.init(start, params, seed=0, chain=0)
    state, log = drive(params, f, state, 6)
    for proposal, info in log[1:]:
        assert np.all(np.isfinite(proposal.position))
        assert info.outcome == "rejected"
    assert state.divergences == 5 and np.array_equal(state.position, start)


def test_options_are_checked() -> None:
    for options in (
        {"num_steps": 0},
        {"step_jitter": 1.0},
        {"step_size": -1.0},
        {"target_acceptance": 1.0},
        {"metric": "full"},
        {"gradient_check": -1},
    ):
        with pytest.raises(OptionError):
            hmc.make_params(2, options, warmup=10)
    assert hmc.chain_floats(10, hmc.make_params(10, {}, warmup=10)) > 0


def test_replay_through_the_codec_at_every_evaluation_is_bit_for_bit() -> None:
    # As a service that stores the state between two requests: each state decoded
    # from its JSON before the next ask and tell.
    params = hmc.make_params(3, {}, warmup=50)
    f = gaussian(np.zeros(3), np.diag([1.0, 4.0, 0.25]))
    start = np.array([0.5, -1.0, 0.2])
    direct, log = drive(params, f, hmc.init(start, params, seed=9, chain=0), 800)
    state = hmc.init(start, params, seed=9, chain=0)
    for proposal, _ in log:
        hot, cold = encode(state)
        state = decode(json.loads(json.dumps(hot)), json.loads(json.dumps(cold)))
        again = hmc.ask(state, params)
        assert again.position.tobytes() == proposal.position.tobytes()
        value, gradient = f(again.position)
        state, _ = hmc.tell_gradient(state, params, again, value, gradient)
    assert encode(state) == encode(direct)


def test_a_small_step_accepting_almost_always_is_not_a_warning() -> None:
    """``hmc``'s acceptance is not judged (as ``nuts``'s is not): a step size that
    accepts nearly every trajectory is inefficient, not wrong, and the step size kept
    after warm-up accepts 0.89 to 0.94 on Gaussians. The same acceptance from ``rwm``
    (a fixed step of 0.01 on a unit Gaussian) still warns."""
    from kameleon.core import SAMPLERS
    from kameleon.core.running.inprocess import assess_results, sample_chains

    def normal(x: np.ndarray) -> tuple[float, np.ndarray]:
        return -0.5 * float(x @ x), -x

    for algorithm, options in (
        ("hmc", {"step_size": 0.05, "adapt_step_size": False}),
        ("rwm", {"scale": 0.01, "adapt_scale": False}),
    ):
        evaluate: Any = normal if algorithm == "hmc" else (lambda x: normal(x)[0])
        results = sample_chains(
            evaluate, 2, algorithm=algorithm, chains=2, iterations=300, warmup=100,
            seed=2, options=options, warn=False,
        )  # fmt: skip
        assert min(r.accepted[100:].mean() for r in results) > 0.95
        params = SAMPLERS[algorithm].make_params(2, options, warmup=100)
        codes = {
            f.code
            for f in assess_results(SAMPLERS[algorithm], params, results, ["a", "b"], 100).findings
        }
        assert ("acceptance_high" in codes) == (algorithm == "rwm"), (algorithm, codes)


#: A chain's state as the code before trajectories were begun at the previous
#: transition's end wrote it (``seed`` 7, chain 1, ``x^4 / 4`` added to a standard
#: normal's first coordinate, 20 warm-up transitions): within a trajectory (5 leapfrog
#: points told), and between two transitions (its trajectory the finished one's); with
#: the next proposal that code asked, and a digest of the next 200 proposals' positions
#: and the position after them.
BEFORE_BEGUN_TRAJECTORIES = json.loads(
    '{"between":{"hot":{"c":"hmc.State","v":{"position":{"a":"f8","s":[2],"b":"ouFvwPsa07'
    '/gF4aRtACxvw=="},"logdensity":-0.04874866927392048,"iteration":14,"accepted":9,"epoc'
    'h":0,"seed":7,"chain":1,"gradient":{"a":"f8","s":[2],"b":"pV6MV9jO1D/gF4aRtACxPw=="}'
    ',"step":0,"evaluations":170,"step_size":0.1192913214554099,"n_steps":2,"diverging":t'
    'rue,"divergences":0,"energy":1.554885337981142,"leapfrog":0,"traj_position":{"a":"f8'
    '","s":[2],"b":"NBxzrZgh7b/KYCAo/IsGwA=="},"traj_momentum":{"a":"f8","s":[2],"b":"fW8'
    'dYIP/8T/SX9b5L93tPw=="},"traj_gradient":{"a":"f8","s":[2],"b":"sOK50v+i+j/KYCAo/IsGQ'
    'A=="},"traj_energy0":1.554885337981142},"schema_version":1},"cold":{"check":{"c":"gr'
    'adient_check.Check","v":{"pending":false,"coordinate":0,"level":0,"plus":{"f":"nan"}'
    ',"previous":{"f":"nan"},"unchecked":0}},"adapt":{"c":"gradient_warmup.DualAveraging"'
    ',"v":{"log_step":-2.1261866980783353,"log_step_bar":-0.8062604013690093,"h_bar":0.06'
    '316883059533618,"count":14,"mu":2.6009357341398918}},"metric":{"a":"f8","s":[2],"b":'
    '"AAAAAAAA8D8AAAAAAADwPw=="},"window":{"c":"gradient_warmup.MetricWindow","v":{"count'
    '":11,"mean_x":{"a":"f8","s":[2],"b":"/oylsxsstT8zziQDD5HOvw=="},"m2_x":{"a":"f8","s"'
    ':[2],"b":"UrBvwfmLBUCEK1I8SMUaQA=="},"mean_g":{"a":"f8","s":[2],"b":"EMFARCM9zL8zziQ'
    'DD5HOPw=="},"m2_g":{"a":"f8","s":[2],"b":"slkMK3cMHUCEK1I8SMUaQA=="},"outer":{"a":"f'
    '8","s":[0,0],"b":""}}}},"next":[-0.18345119633250617,-0.0025251078611129435],"digest'
    '":"b717fd886ecff72f27a666fce38912514a89f08ca9b3a00d4c457eb05e965ad0"},"within":{"hot'
    '":{"c":"hmc.State","v":{"position":{"a":"f8","s":[2],"b":"ouFvwPsa07/gF4aRtACxvw=="}'
    ',"logdensity":-0.04874866927392048,"iteration":14,"accepted":9,"epoch":0,"seed":7,"c'
    'hain":1,"gradient":{"a":"f8","s":[2],"b":"pV6MV9jO1D/gF4aRtACxPw=="},"step":5,"evalu'
    'ations":175,"step_size":0.1192913214554099,"n_steps":2,"diverging":true,"divergences'
    '":0,"energy":1.554885337981142,"leapfrog":5,"traj_position":{"a":"f8","s":[2],"b":"F'
    'MlISSxE0j8ADIOG22bPPw=="},"traj_momentum":{"a":"f8","s":[2],"b":"XeK5+Vwi8D+ZSRnLVmX'
    'gPw=="},"traj_gradient":{"a":"f8","s":[2],"b":"jW2IXhfB078ADIOG22bPvw=="},"traj_ener'
    'gy0":0.7120710541582024},"schema_version":1},"cold":{"check":{"c":"gradient_check.Ch'
    'eck","v":{"pending":false,"coordinate":0,"level":0,"plus":{"f":"nan"},"previous":{"f'
    '":"nan"},"unchecked":0}},"adapt":{"c":"gradient_warmup.DualAveraging","v":{"log_step'
    '":-2.1261866980783353,"log_step_bar":-0.8062604013690093,"h_bar":0.06316883059533618'
    ',"count":14,"mu":2.6009357341398918}},"metric":{"a":"f8","s":[2],"b":"AAAAAAAA8D8AAA'
    'AAAADwPw=="},"window":{"c":"gradient_warmup.MetricWindow","v":{"count":11,"mean_x":{'
    '"a":"f8","s":[2],"b":"/oylsxsstT8zziQDD5HOvw=="},"m2_x":{"a":"f8","s":[2],"b":"UrBvw'
    'fmLBUCEK1I8SMUaQA=="},"mean_g":{"a":"f8","s":[2],"b":"EMFARCM9zL8zziQDD5HOPw=="},"m2'
    '_g":{"a":"f8","s":[2],"b":"slkMK3cMHUCEK1I8SMUaQA=="},"outer":{"a":"f8","s":[0,0],"b'
    '":""}}}},"next":[0.3969341248936676,0.3014319186488966],"digest":"d9aca07942cd02f398'
    'a0b46226e8c1cfddce6d95ba69540a1abaa18859ba87ce"}}'
)


def _quartic(x: Any) -> tuple[float, Any]:
    return -0.5 * float(x @ x) - 0.25 * float(x[0]) ** 4, -x - np.array([x[0] ** 3, 0.0])


@pytest.mark.parametrize("where", ["within", "between"])
def test_a_state_written_before_trajectories_were_begun_goes_on_with_the_same_draws(
    where: str,
) -> None:
    doc = BEFORE_BEGUN_TRAJECTORIES[where]
    params = hmc.make_params(2, {}, warmup=20)
    state = decode(doc["hot"], doc["cold"])
    assert state.traj_transition == 0  # not in the document: its default
    assert (state.leapfrog > 0) == (where == "within")
    assert hmc.ask(state, params).position.tolist() == doc["next"]
    digest = hashlib.sha256()
    for _ in range(200):
        proposal = hmc.ask(state, params)
        digest.update(proposal.position.tobytes())
        value, gradient = _quartic(proposal.position)
        state, _ = hmc.tell_gradient(state, params, proposal, value, gradient)
    digest.update(state.position.tobytes())
    assert digest.hexdigest() == doc["digest"]


def test_a_transition_draws_its_momentum_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trajectory is begun when the transition before it ends (or the initial point
    # is told): its first point's ask and tell read the momentum, and draw none.
    drawn: list[int] = []
    draw = hmc.draw_momentum

    def counted(rng: Any, metric: Any) -> Any:
        drawn.append(1)
        return draw(rng, metric)

    monkeypatch.setattr(hmc, "draw_momentum", counted)
    params = hmc.make_params(2, {"num_steps": 4}, warmup=10)
    f = gaussian(np.zeros(2), np.diag([1.0, 4.0]))
    state = hmc.init(np.array([0.3, 0.1]), params, seed=2, chain=0)
    state, _ = drive(params, f, state, 1)  # the initial point: the first momentum drawn
    assert len(drawn) == 1 and state.traj_transition == 1
    state, _ = drive(params, f, state, 301)
    while state.leapfrog:
        state, _ = drive(params, f, state, 1)
    # One per transition ended, and the next one's, begun.
    assert len(drawn) == state.iteration + 1
    assert state.traj_transition == state.iteration + 1
    # Asking (again) draws none.
    hmc.ask(state, params)
    hmc.ask(state, params)
    assert len(drawn) == state.iteration + 1


def test_a_transition_draws_its_step_size_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The jittered step size is drawn when the trajectory is begun and kept in the state
    # (traj_step_size), not drawn again at each point's ask and tell; the documents of
    # the test above, written before it was kept, go on with the same draws.
    drawn: list[int] = []
    make = hmc.generator

    def counted(seed: int, chain: int, t: int, stream: Any) -> Any:
        if stream == hmc.Stream.MIX:
            drawn.append(t)
        return make(seed, chain, t, stream)

    monkeypatch.setattr(hmc, "generator", counted)
    params = hmc.make_params(2, {"num_steps": 4}, warmup=10)
    f = gaussian(np.zeros(2), np.diag([1.0, 4.0]))
    state = hmc.init(np.array([0.3, 0.1]), params, seed=2, chain=0)
    state, _ = drive(params, f, state, 1 + 4 * 50 + 2)  # mid-trajectory
    assert state.leapfrog == 2
    assert drawn == list(range(1, state.iteration + 2))  # one per transition begun
    assert state.traj_step_size == hmc._step_size(state, params, state.iteration + 1)
