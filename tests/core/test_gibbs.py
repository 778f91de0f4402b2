"""Metropolis-within-Gibbs over blocks (``gibbs``): its options, the steps of a sweep,
the client's conditional draws, and its exactness on a correlated Gaussian."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.summary import ess_mean, per_parameter
from kameleon.core.interface.sampler import OptionError, tell_one
from kameleon.core.numerics.rng import Stream, generator, substream
from kameleon.core.running.inprocess import run_chain, sample_chains
from kameleon.core.samplers import gibbs

SAMPLER = SAMPLERS["gibbs"]

# A correlated 3-d Gaussian: x0 correlated with the block (x1, x2).
MEAN = np.array([1.0, -2.0, 0.5])
COV = np.array([[1.0, 0.6, 0.3], [0.6, 2.0, 0.9], [0.3, 0.9, 1.5]])
PRECISION = np.linalg.inv(COV)


def _logdensity(x: np.ndarray) -> float:
    d = x - MEAN
    return float(-0.5 * d @ PRECISION @ d)


def _params(blocks: Any = None, dim: int = 3, warmup: int = 100, **more: Any) -> gibbs.Params:
    options = dict(more)
    if blocks is not None:
        options["blocks"] = blocks
    return SAMPLER.make_params(dim, options, warmup=warmup)  # type: ignore[no-any-return]


def _conditional_draw(indices: list[int], x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A draw of ``x[indices]`` from the Gaussian's full conditional given the rest."""
    a = np.array(indices)
    rest = np.array([k for k in range(3) if k not in indices])
    q_aa = PRECISION[np.ix_(a, a)]
    mean = MEAN[a] - np.linalg.solve(q_aa, PRECISION[np.ix_(a, rest)] @ (x[rest] - MEAN[rest]))
    return rng.multivariate_normal(mean, np.linalg.inv(q_aa))


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("blocks", "option"),
    [
        ([{"indices": [0, 1]}, {"indices": [1, 2]}], "blocks.1.indices.0"),  # overlap
        ([{"indices": [0]}, {"indices": [2]}], "blocks"),  # a gap: 1 in no block
        ([{"indices": [0, 1, 2, 3]}], "blocks.0.indices.3"),  # out of range
        ([{"indices": [0, -1, 1, 2]}], "blocks.0.indices.1"),  # negative
        ([{"indices": []}, {"indices": [0, 1, 2]}], "blocks.0.indices"),  # an empty block
        ([], "blocks"),  # no blocks
        ([{"indices": [0, 0, 1, 2]}], "blocks.0.indices"),  # a repeat within a block
        ([{"indices": [0, 1, 2], "speed": 0}], "blocks.0.speed"),
        ([{"indices": [0, 1, 2], "speed": 1.5}], "blocks.0.speed"),
        ([{"indices": [0, 1, 2], "conditional": "yes"}], "blocks.0.conditional"),
        ([{"indices": [0, 1, 2], "fast": True}], "blocks.0.fast"),  # unknown field
        ([{"speed": 2}], "blocks.0.indices"),  # indices left out
        ([{"indices": [0, "1", 2]}], "blocks.0.indices.1"),
        ([[0, 1, 2]], "blocks.0"),  # not an object
        ({"indices": [0, 1, 2]}, "blocks"),  # not a list
    ],
)
def test_blocks_must_partition_the_coordinates(blocks: Any, option: str) -> None:
    with pytest.raises(OptionError) as excinfo:
        _params(blocks)
    assert excinfo.value.option == option


def test_default_is_one_metropolis_block_per_coordinate() -> None:
    params = _params()
    assert params.the_blocks == tuple(gibbs.Block((k,)) for k in range(3))
    assert gibbs.schedule(params) == (0, 1, 2)
    assert all(gibbs.conditional_indices(params, s) is None for s in range(3))


def test_speed_repeats_a_block_within_a_sweep() -> None:
    params = _params([{"indices": [2, 0], "speed": 3}, {"indices": [1], "conditional": True}])
    assert gibbs.schedule(params) == (0, 0, 0, 1)
    assert gibbs.conditional_indices(params, 3) == (1,)
    assert gibbs.conditional_indices(params, 0) is None
    # A sweep is four evaluations: three of the first block, then the draw.
    state = _initialised(params)
    steps = []
    for _ in range(4):
        proposal = SAMPLER.ask(state, params)
        steps.append((proposal.kind, proposal.step, proposal.iteration))
        draw = np.array([0.0]) if proposal.kind == "conditional" else None
        value = _logdensity(_with(proposal, draw))
        state, info = tell_one(SAMPLER, state, params, proposal, value, draw=draw)
    assert steps == [
        ("proposal", 0, 1),
        ("proposal", 1, 1),
        ("proposal", 2, 1),
        ("conditional", 3, 1),
    ]
    assert info.outcome in ("accepted", "rejected") and state.iteration == 1


def _with(proposal: Any, draw: np.ndarray | None) -> np.ndarray:
    point = np.array(proposal.position)
    if draw is not None:
        point[list(proposal.indices)] = draw
    return point


def _initialised(params: gibbs.Params, start: Any = (0.5, -1.0, 0.0)) -> Any:
    state = SAMPLER.init(np.array(start), params, seed=3, chain=0)
    proposal = SAMPLER.ask(state, params)
    state, info = SAMPLER.tell(state, params, proposal, _logdensity(proposal.position))
    assert info.outcome == "initialized"
    return state


# --------------------------------------------------------------------------- steps


def test_a_metropolis_update_moves_its_block_only() -> None:
    params = _params([{"indices": [0]}, {"indices": [2, 1]}])
    state = _initialised(params)
    first = SAMPLER.ask(state, params)
    assert first.kind == "proposal" and first.step == 0 and first.block is None
    moved = first.position != state.position
    assert moved.tolist() == [True, False, False]
    state, info = SAMPLER.tell(state, params, first, _logdensity(first.position))
    assert info.outcome == "step"
    second = SAMPLER.ask(state, params)
    assert second.step == 1
    assert (second.position != state.position).tolist() == [False, True, True]
    again = SAMPLER.ask(state, params)  # pure
    assert again.position.tobytes() == second.position.tobytes()


def test_a_rejected_update_keeps_the_state_and_the_sweep_goes_on() -> None:
    params = _params([{"indices": [0]}, {"indices": [1, 2]}])
    state = _initialised(params)
    proposal = SAMPLER.ask(state, params)
    new, info = SAMPLER.tell(state, params, proposal, -math.inf)
    assert (info.outcome, info.acceptance_probability) == ("step", 0.0)
    assert new.position.tolist() == state.position.tolist() and new.step == 1
    assert new.logdensity == state.logdensity and new.iteration == 0


def test_the_acceptance_is_the_metropolis_ratio_of_the_told_values() -> None:
    """Accepted exactly when the step's accept uniform is below ``exp(new - old)``."""
    params = _params([{"indices": [0, 1, 2]}])
    state = _initialised(params)
    proposal = SAMPLER.ask(state, params)
    u = generator(3, 0, 1, substream(Stream.ACCEPT, 0)).random()
    for delta in (math.log(u) - 1e-9, math.log(u) + 1e-9):
        _, info = SAMPLER.tell(state, params, proposal, state.logdensity + delta)
        assert info.outcome == ("accepted" if math.log(u) < delta else "rejected")
        assert info.acceptance_probability == pytest.approx(min(1.0, math.exp(delta)))


def test_a_conditional_step_applies_the_told_draw() -> None:
    params = _params([{"indices": [2, 0], "conditional": True}, {"indices": [1]}])
    state = _initialised(params)
    proposal = SAMPLER.ask(state, params)
    assert (proposal.kind, proposal.block, proposal.indices) == ("conditional", 0, (2, 0))
    assert proposal.position.tolist() == state.position.tolist()
    draw = np.array([0.25, 1.5])  # x2, x0 in the block's order
    value = _logdensity(np.array([1.5, state.position[1], 0.25]))
    new, info = tell_one(SAMPLER, state, params, proposal, value, draw=draw)
    assert (info.outcome, info.acceptance_probability) == ("step", 1.0)
    assert new.position.tolist() == [1.5, state.position[1], 0.25]
    assert new.logdensity == value and new.moved
    assert gibbs.told_record(new, params, 1, 0) == (value, pytest.approx(draw))
    assert gibbs.told_record(new, params, 1, 1) is None  # not told yet


@pytest.mark.parametrize(
    ("draw", "value", "message"),
    [
        (None, -1.0, "needs the client's draw"),
        (np.array([1.0]), -1.0, "must have 2 values"),
        (np.array([1.0, math.nan]), -1.0, "must be finite"),
        (np.array([1.0, math.inf]), -1.0, "must be finite"),
        (np.array([1.0, 2.0]), -math.inf, "must be finite"),
    ],
)
def test_a_bad_conditional_result_is_refused(draw: Any, value: float, message: str) -> None:
    params = _params([{"indices": [2, 0], "conditional": True}, {"indices": [1]}])
    state = _initialised(params)
    proposal = SAMPLER.ask(state, params)
    with pytest.raises(ValueError, match=message):
        tell_one(SAMPLER, state, params, proposal, value, draw=draw)


def test_a_draw_at_a_metropolis_update_is_refused() -> None:
    params = _params([{"indices": [0]}, {"indices": [1, 2], "conditional": True}])
    state = _initialised(params)
    proposal = SAMPLER.ask(state, params)
    with pytest.raises(ValueError, match="takes no draw"):
        tell_one(SAMPLER, state, params, proposal, -1.0, draw=np.array([0.0]))


def test_the_records_cover_the_current_sweep_and_the_one_before() -> None:
    params = _params([{"indices": [0]}, {"indices": [1, 2], "conditional": True}])
    state = _initialised(params)
    told = []
    for _ in range(4):  # two sweeps
        proposal = SAMPLER.ask(state, params)
        draw = np.array([0.1, 0.2]) if proposal.kind == "conditional" else None
        value = _logdensity(_with(proposal, draw))
        state, _ = tell_one(SAMPLER, state, params, proposal, value, draw=draw)
        told.append((proposal.iteration, proposal.step, value, draw))
    assert state.iteration == 2
    for iteration, step, value, draw in told:
        record = gibbs.told_record(state, params, iteration, step)
        if iteration == 1:
            assert record is None  # older than the sweep before the current one
        else:
            assert record is not None and record[0] == value
            assert (record[1] is None) == (draw is None)


def test_adaptation_stops_after_warmup() -> None:
    params = _params([{"indices": [0]}, {"indices": [1, 2]}], warmup=200)
    result = run_chain(SAMPLER, params, _logdensity, MEAN, 400, seed=5, chain=0)
    state = result.state
    assert state.moments.count == 0 or state.iteration > params.warmup
    frozen = (state.log_lambdas.tolist(), state.window_covariance, state.moments.count)
    again = run_chain(SAMPLER, params, _logdensity, MEAN, 600, seed=5, chain=0).state
    assert again.log_lambdas.tolist() == frozen[0]
    assert again.moments.count == frozen[2]
    # The scales moved away from 1 in warm-up (toward 0.44 and 0.234 acceptance).
    assert np.all(state.log_lambdas != 0.0)


# --------------------------------------------------------------------------- exactness


def _check_moments(draws: np.ndarray, label: str) -> dict[str, Any]:
    """Pooled means and sds of ``draws`` (chains, n, 3) against the truth, within 4 Monte
    Carlo standard errors: a false alarm of a correct sampler is about a 1-in-16 000
    event per comparison under a normal approximation. The sd's standard error is that of
    the mean of ``(x - mu)^2`` mapped through ``d sd = d var / (2 sd)``."""
    sd_true = np.sqrt(np.diag(COV))
    ess = per_parameter(ess_mean, draws)
    assert np.all(ess > 400), f"{label}: effective sample sizes {ess}"
    mean = draws.mean(axis=(0, 1))
    mcse = sd_true / np.sqrt(ess)
    assert np.all(np.abs(mean - MEAN) < 4 * mcse), f"{label}: mean {mean}, mcse {mcse}"
    squares = (draws - MEAN) ** 2
    ess_sq = per_parameter(ess_mean, squares)
    var = squares.mean(axis=(0, 1))
    var_mcse = squares.std(axis=(0, 1)) / np.sqrt(ess_sq)
    sd = np.sqrt(var)
    sd_mcse = var_mcse / (2 * sd_true)
    assert np.all(np.abs(sd - sd_true) < 4 * sd_mcse), f"{label}: sd {sd}, mcse {sd_mcse}"
    return {
        "mean_z": ((mean - MEAN) / mcse).round(2).tolist(),
        "sd_z": ((sd - sd_true) / sd_mcse).round(2).tolist(),
        "ess": ess.round().tolist(),
    }


@pytest.mark.slow
def test_metropolis_blocks_sample_a_correlated_gaussian_exactly() -> None:
    """Blocks [0] and [1, 2], both by adaptive Metropolis-Hastings, x0 updated twice per
    sweep: the post-warm-up draws have the Gaussian's means and sds."""
    results = sample_chains(
        _logdensity,
        3,
        algorithm="gibbs",
        chains=4,
        warmup=1000,
        iterations=4000,
        seed=7,
        options={"blocks": [{"indices": [0], "speed": 2}, {"indices": [1, 2]}]},
        warn=False,
    )
    draws = np.stack([r.draws[1000:] for r in results])
    print(_check_moments(draws, "metropolis blocks"))


@pytest.mark.slow
def test_a_conditional_block_samples_a_correlated_gaussian_exactly() -> None:
    """Block [0] by Metropolis-Hastings, block [1, 2] drawn in process from its exact
    full conditional: the same truth."""
    results = sample_chains(
        _logdensity,
        3,
        algorithm="gibbs",
        chains=4,
        warmup=500,
        iterations=3000,
        seed=8,
        options={"blocks": [{"indices": [0]}, {"indices": [1, 2], "conditional": True}]},
        conditionals={1: lambda x, rng: _conditional_draw([1, 2], x, rng)},
        warn=False,
    )
    draws = np.stack([r.draws[500:] for r in results])
    print(_check_moments(draws, "conditional block"))


def test_in_process_runs_need_a_draw_function_per_conditional_block() -> None:
    options = {"blocks": [{"indices": [0]}, {"indices": [1, 2], "conditional": True}]}
    with pytest.raises(ValueError, match="block 1 is conditional"):
        sample_chains(_logdensity, 3, algorithm="gibbs", options=options, iterations=10)
    with pytest.raises(ValueError, match="block 0 is not a conditional block"):
        sample_chains(
            _logdensity,
            3,
            algorithm="gibbs",
            options=options,
            iterations=10,
            conditionals={0: lambda x, rng: x[:1], 1: lambda x, rng: x[1:]},
        )


def test_in_process_runs_replay_bit_for_bit() -> None:
    options = {"blocks": [{"indices": [0]}, {"indices": [1, 2], "conditional": True}]}
    fns = {1: lambda x, rng: _conditional_draw([1, 2], x, rng)}

    def run() -> np.ndarray:
        results = sample_chains(
            _logdensity,
            3,
            algorithm="gibbs",
            chains=2,
            warmup=50,
            iterations=100,
            seed=4,
            options=options,
            conditionals=fns,
            warn=False,
        )
        return np.stack([r.draws for r in results])

    assert run().tobytes() == run().tobytes()


def test_each_block_adapts_toward_its_own_acceptance_target() -> None:
    """After a warm-up of 1500 sweeps, the mean acceptance probability of each block's
    updates over the next 2000 is near its target: 0.44 for the block of one coordinate,
    0.234 for the block of two. Within 0.06: Robbins-Monro stops within a few hundredths
    of the target (its last steps are about 1/sqrt(t) ~ 0.03 in log scale), and the mean
    of 2000 probabilities has a standard error of about 0.01."""
    params = _params([{"indices": [0]}, {"indices": [1, 2]}], warmup=1500)
    state = _initialised(params, start=MEAN)
    probabilities: dict[int, list[float]] = {0: [], 1: []}
    while state.iteration < 3500:
        proposal = SAMPLER.ask(state, params)
        step = proposal.step
        state, info = SAMPLER.tell(state, params, proposal, _logdensity(proposal.position))
        if proposal.iteration > params.warmup:
            probabilities[gibbs.schedule(params)[step]].append(info.acceptance_probability)
    rates = {b: float(np.mean(p)) for b, p in probabilities.items()}
    print(rates)
    assert abs(rates[0] - 0.44) < 0.06 and abs(rates[1] - 0.234) < 0.06, rates
