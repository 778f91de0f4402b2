"""SGLD: the posterior of a Gaussian mean from minibatches, its minibatches, its step
schedule and its options."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import Parts
from kameleon.core.interface.sampler import OptionError, tell_one
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.samplers import sgld

N = 1000
PRIOR_SD = 10.0
DATA = np.random.default_rng(1).normal([1.5, -0.5], 1.0, size=(N, 2))


def _parts(x: np.ndarray, batch: list[int]) -> tuple[float, float, np.ndarray, np.ndarray]:
    """x_i ~ N(theta, I), theta ~ N(0, 10^2 I): the prior, and the minibatch's sum."""
    r = DATA[batch] - x
    return (
        -0.5 * float(x @ x) / PRIOR_SD**2,
        -0.5 * float((r * r).sum()),
        -x / PRIOR_SD**2,
        r.sum(axis=0),
    )


def test_weighted_draws_near_the_conjugate_posterior() -> None:
    # The exact posterior: precision N + 1/100, mean sum(x) / (N + 1/100), sd about
    # 0.032. Draws after warm-up, weighted by their step size (Welling and Teh): the
    # mean within half a posterior sd of the exact one; the sd, which SGLD without
    # accept/reject overstates (its minibatch noise and its discretisation), within
    # [0.8, 1.6] times the exact (measured: 1.11 to 1.17).
    runs = sample_chains(
        _parts,  # type: ignore[arg-type]
        2,
        algorithm="sgld",
        chains=2,
        iterations=10000,
        warmup=1000,
        seed=3,
        options={"data_size": N, "step_size": 1e-2, "step_offset": 100.0},
        warn=False,
    )
    precision = N + 1 / PRIOR_SD**2
    mean, sd = DATA.sum(axis=0) / precision, 1 / math.sqrt(precision)
    for run in runs:
        w = run.stat("step_size")
        assert w is not None
        w, d = w[1000:], run.draws[1000:]
        m = (w[:, None] * d).sum(axis=0) / w.sum()
        s = np.sqrt((w[:, None] * (d - m) ** 2).sum(axis=0) / w.sum())
        assert np.all(np.abs(m - mean) < 0.5 * sd), (m, mean)
        assert np.all((0.8 * sd < s) & (s < 1.6 * sd)), (s, sd)
        assert run.accepted.all()


def test_step_sizes_follow_the_schedule() -> None:
    params = sgld.make_params(
        1, {"data_size": 10, "step_size": 0.1, "step_offset": 2.0, "step_decay": 0.75}, warmup=0
    )
    runs = sample_chains(
        lambda x, b: (-0.5 * float(x @ x), 0.0, -x, np.zeros(1)),  # type: ignore[arg-type]
        1,
        algorithm="sgld",
        chains=1,
        iterations=20,
        warmup=0,
        options={"data_size": 10, "step_size": 0.1, "step_offset": 2.0, "step_decay": 0.75},
        warn=False,
    )
    got = runs[0].stat("step_size")
    want = [0.1 * (2.0 + t) ** -0.75 for t in range(1, 21)]
    assert got is not None
    np.testing.assert_allclose(got, want, rtol=1e-14)
    assert sgld.step_size(params, 5) == pytest.approx(0.1 * 7.0**-0.75, rel=1e-15)


def _params(**options: object) -> sgld.Params:
    return sgld.make_params(2, {"data_size": N, **options}, warmup=0)


def test_minibatches_reproducible_distinct_in_range() -> None:
    params = _params(batch_size=50)
    batches = [sgld.minibatch(params, seed=5, chain=1, iteration=t) for t in range(20)]
    again = [sgld.minibatch(params, seed=5, chain=1, iteration=t) for t in range(20)]
    assert batches == again
    for b in batches:
        assert len(b) == 50 and len(set(b)) == 50
        assert list(b) == sorted(b)
        assert all(type(i) is int and 0 <= i < N for i in b)
    assert len(set(batches)) == 20  # a new minibatch every iteration
    assert sgld.minibatch(params, seed=5, chain=2, iteration=3) != batches[3]
    # The default size: min(N, 100).
    assert len(sgld.minibatch(_params(), seed=0, chain=0, iteration=1)) == 100
    small = sgld.make_params(1, {"data_size": 7}, warmup=0)
    assert sgld.minibatch(small, seed=0, chain=0, iteration=1) == tuple(range(7))


def test_the_ask_carries_the_minibatch_at_the_current_point() -> None:
    params = _params(batch_size=10)
    state = sgld.init(np.zeros(2), params, seed=0, chain=0)
    first = sgld.ask(state, params)
    assert first.kind == "init" and first.minibatch == sgld.minibatch(
        params, seed=0, chain=0, iteration=0
    )
    parts = Parts(*_parts(first.position, list(first.minibatch or ())))
    state, info = tell_one(sgld.SAMPLER, state, params, first, 0.0, parts=parts)
    assert info.outcome == "initialized"
    assert state.logdensity == pytest.approx(parts.log_prior + 100 * parts.log_likelihood)
    nxt = sgld.ask(state, params)
    assert (nxt.kind, nxt.iteration) == ("minibatch", 1)
    np.testing.assert_array_equal(nxt.position, state.position)
    new, info = tell_one(
        sgld.SAMPLER,
        state,
        params,
        nxt,
        0.0,
        parts=Parts(*_parts(nxt.position, list(nxt.minibatch or ()))),
    )
    assert (info.outcome, info.acceptance_probability) == ("accepted", 1.0)
    assert not np.array_equal(new.position, state.position)
    with pytest.raises(ValueError, match="log prior"):
        tell_one(sgld.SAMPLER, state, params, nxt, 0.0)


def test_outside_the_support_the_chain_stays() -> None:
    params = _params(batch_size=10)
    state = sgld.init(np.zeros(2), params, seed=0, chain=0)
    nan = np.full(2, math.nan)
    first = sgld.ask(state, params)
    out, info = tell_one(
        sgld.SAMPLER, state, params, first, 0.0, parts=Parts(-math.inf, 0.0, nan, nan)
    )
    assert info.outcome == "outside_support" and out.logdensity is None
    state, _ = tell_one(
        sgld.SAMPLER, state, params, first, 0.0, parts=Parts(0.0, 0.0, np.zeros(2), np.zeros(2))
    )
    nxt = sgld.ask(state, params)
    new, info = tell_one(
        sgld.SAMPLER, state, params, nxt, 0.0, parts=Parts(-math.inf, math.nan, nan, nan)
    )
    assert info.outcome == "rejected" and new.iteration == 1
    np.testing.assert_array_equal(new.position, state.position)


def test_bad_parts_are_refused() -> None:
    params = _params(batch_size=10)
    state = sgld.init(np.zeros(2), params, seed=0, chain=0)
    first = sgld.ask(state, params)
    with pytest.raises(ValueError, match="2 values"):
        tell_one(
            sgld.SAMPLER, state, params, first, 0.0, parts=Parts(0.0, 0.0, np.zeros(3), np.zeros(2))
        )
    with pytest.raises(ValueError, match="finite"):
        tell_one(
            sgld.SAMPLER,
            state,
            params,
            first,
            0.0,
            parts=Parts(0.0, 0.0, np.zeros(2), np.array([0.0, math.inf])),
        )


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({}, "data_size"),
        ({"data_size": 0}, "data_size"),
        ({"data_size": 10, "batch_size": 11}, "batch_size"),
        ({"data_size": 10, "batch_size": 0}, "batch_size"),
        ({"data_size": 10, "step_size": 0.0}, "step_size"),
        ({"data_size": 10, "step_offset": -1.0}, "step_offset"),
        ({"data_size": 10, "step_decay": 0.5}, "step_decay"),
        ({"data_size": 10, "step_decay": 1.5}, "step_decay"),
        ({"data_size": 10, "gradient_check": 1}, "gradient_check"),
    ],
)
def test_options_errors(options: dict[str, object], option: str) -> None:
    with pytest.raises(OptionError) as err:
        sgld.make_params(2, options, warmup=0)
    assert err.value.option == option


def test_required_data_size_message() -> None:
    with pytest.raises(OptionError, match="is required: the number of data points, N >= 1"):
        sgld.make_params(2, {}, warmup=0)


def test_registered() -> None:
    assert SAMPLERS["sgld"] is sgld.SAMPLER
    assert SAMPLERS["sgld"].evaluation.parts and SAMPLERS["sgld"].stats == ("step_size",)
