"""``core.running.batch``: many chains stepped together equal the chains stepped one by one, bit
for bit, for every sampler, over runs that cross warm-up and its window ends, with
chains at different iterations in one batch, initial points told ``-inf`` and proposals
outside the support."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import Proposal, StepInfo, reset
from kameleon.core.interface.sampler import Sampler
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.running.batch import ARRAY_PHILOX_MIN, accept_block, ask_many, tell_many
from kameleon.core.samplers import am, nuts, rwm
from tests.core.test_interface import _assert_identical

DIM = 3
CHAINS = 5
#: Chain ``c`` joins the batch at round ``c * STAGGER``: batches mix iterations.
STAGGER = 7


def _logdensity(x: np.ndarray) -> float:
    """A correlated Gaussian cut at ``x[0] > -1.5``: proposals outside happen."""
    if x[0] <= -1.5:
        return -math.inf
    return -0.5 * float(x @ x) - 0.4 * float(x[0] * x[1])


def _run_one(sampler: Sampler[Any, Any], params: Any, chain: int, rounds: int) -> list[Any]:
    """The states and infos of one chain stepped alone, as the per-chain API does it."""
    state = sampler.init(_start(chain), params, seed=11 + chain, chain=chain)
    history: list[Any] = []
    for _ in range(rounds - chain * STAGGER):
        proposal = sampler.ask(state, params)
        state, info = sampler.tell(state, params, proposal, _value(chain, proposal))
        history.append((state, info))
        if info.outcome == "outside_support":
            state = reset(state, np.zeros(DIM))
    return history


def _start(chain: int) -> np.ndarray:
    # Chain 1 starts outside the support: its first tell is -inf, then it is reset.
    return np.array([-2.0, 0.5, 0.5]) if chain == 1 else np.full(DIM, 0.1 * chain)


def _value(chain: int, proposal: Proposal) -> float:
    return _logdensity(np.asarray(proposal.position))


# A sampler that needs gradients, or its target in parts (sgld), is told chain by chain
# by tell_many (tell_one each).
@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, s in SAMPLERS.items()
        if not (s.evaluation.gradient or s.evaluation.parts or s.multistep)
    ),
)
def test_tell_many_equals_tell_chain_by_chain(name: str) -> None:
    sampler = SAMPLERS[name]
    kernel = name not in ("rwm", "am")
    warmup, rounds = (40, 70) if kernel else (150, 260)
    if sampler.multistep:  # gibbs: a transition is a sweep of DIM evaluations
        warmup, rounds = 20, 70 * DIM
    params = sampler.make_params(DIM, {}, warmup=warmup)
    expected = [_run_one(sampler, params, c, rounds) for c in range(CHAINS)]

    states = [sampler.init(_start(c), params, seed=11 + c, chain=c) for c in range(CHAINS)]
    got: list[list[Any]] = [[] for _ in range(CHAINS)]
    for r in range(rounds):
        batch = [c for c in range(CHAINS) if r >= c * STAGGER]
        proposals = ask_many(sampler, [states[c] for c in batch], params)
        values = [_value(c, p) for c, p in zip(batch, proposals, strict=True)]
        told = tell_many(sampler, [states[c] for c in batch], params, proposals, values)
        for c, (state, info) in zip(batch, told, strict=True):
            got[c].append((state, info))
            states[c] = reset(state, np.zeros(DIM)) if info.outcome == "outside_support" else state

    outcomes = {info.outcome for history in got for _, info in history}
    assert {"initialized", "outside_support", "accepted", "rejected"} <= outcomes
    assert any(info.iteration > warmup for _, info in got[0])  # past warm-up
    for c in range(CHAINS):
        assert len(got[c]) == len(expected[c])
        for i, (a, b) in enumerate(zip(expected[c], got[c], strict=True)):
            _assert_identical(a, b, f"chain {c}, tell {i}")


@pytest.mark.parametrize("sampler", [rwm.SAMPLER, am.SAMPLER])
def test_the_metropolis_samplers_take_the_batched_path(sampler: Sampler[Any, Any]) -> None:
    assert callable(sampler.metropolis_adapt)


def test_tell_many_refuses_a_bad_value_before_telling_anything() -> None:
    params = rwm.make_params(DIM, {}, warmup=10)
    states = [rwm.init(np.zeros(DIM), params, seed=1, chain=c) for c in range(2)]
    initialised = [
        s
        for s, _ in tell_many(
            rwm.SAMPLER, states, params, ask_many(rwm.SAMPLER, states, params), [-1.0, -1.0]
        )
    ]
    proposals = ask_many(rwm.SAMPLER, initialised, params)
    with pytest.raises(ValueError, match="log density"):
        tell_many(rwm.SAMPLER, initialised, params, proposals, [-1.0, math.nan])
    with pytest.raises(ValueError, match="does not belong"):
        stale = Proposal(0, "init", initialised[1].position)  # already told
        tell_many(rwm.SAMPLER, initialised, params, [proposals[0], stale], [-1.0, -2.0])
    with pytest.raises(ValueError, match="same length"):
        tell_many(rwm.SAMPLER, initialised, params, proposals, [-1.0])


def test_tell_many_of_nothing_is_nothing() -> None:
    params = am.make_params(DIM, {}, warmup=10)
    assert tell_many(am.SAMPLER, [], params, [], []) == []
    assert ask_many(am.SAMPLER, [], params) == []


def test_step_info_is_returned_not_kept() -> None:
    params = rwm.make_params(DIM, {}, warmup=10)
    (state,) = [rwm.init(np.zeros(DIM), params, seed=1, chain=0)]
    ((after, info),) = tell_many(
        rwm.SAMPLER, [state], params, ask_many(rwm.SAMPLER, [state], params), [-0.5]
    )
    assert isinstance(info, StepInfo) and info.outcome == "initialized"
    assert not hasattr(after, "outcome")


@pytest.mark.parametrize("name", ["rwm", "am"])
def test_enough_chains_for_the_array_philox_give_the_same_steps(name: str) -> None:
    sampler = SAMPLERS[name]
    params = sampler.make_params(DIM, {}, warmup=5)
    n = ARRAY_PHILOX_MIN + 3
    states = [
        sampler.init(np.full(DIM, 0.01 * c), params, seed=7 + c % 3, chain=c) for c in range(n)
    ]
    for _ in range(8):  # through the end of warm-up
        proposals = ask_many(sampler, states, params)
        values = [_logdensity(np.asarray(p.position)) for p in proposals]
        batched = tell_many(sampler, states, params, proposals, values)
        one_by_one = [
            sampler.tell(s, params, p, v) for s, p, v in zip(states, proposals, values, strict=True)
        ]
        for c, (a, b) in enumerate(zip(one_by_one, batched, strict=True)):
            _assert_identical(a, b, f"chain {c}")
        states = [s for s, _ in batched]


def test_an_accept_block_is_each_chains_accept_stream() -> None:
    params = rwm.make_params(DIM, {}, warmup=5)
    states = [rwm.init(np.zeros(DIM), params, seed=3, chain=c) for c in (0, 5, 9)]
    block = accept_block(states, 17, 4)
    assert block.shape == (4, 3, 2)
    for k in range(4):
        for i, state in enumerate(states):
            expected = generator(state.seed, state.chain, 17 + k, Stream.ACCEPT).random(2)
            assert block[k, i].tolist() == expected.tolist()


def _gradient(x: np.ndarray) -> np.ndarray:
    """``_logdensity``'s gradient; not a number outside the support, where it is not read."""
    if x[0] <= -1.5:
        return np.full(DIM, math.nan)
    with np.errstate(over="ignore", invalid="ignore"):
        return -x - 0.4 * np.array([x[1], x[0], 0.0])


def _finite_or_outside(value: float) -> float:
    """A log density that overflowed (not a number: far out) told as ``-inf``."""
    return -math.inf if math.isnan(value) else value


def _writeable(a: Any, b: Any, path: str) -> None:
    """Every array of ``a`` and ``b`` is read-only alike."""
    if isinstance(a, np.ndarray):
        assert a.flags.writeable == b.flags.writeable, path
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for field in dataclasses.fields(a):
            _writeable(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")


def _nuts_run(params: Any, rounds: int, *, batched: bool) -> tuple[list[list[Any]], int]:
    """Every tell of ``CHAINS`` staggered nuts chains, told together through
    ``tell_many`` or chain by chain through ``tell_gradient``; and how many leapfrog
    points were handed out as the chain's position (an overflow in their place)."""
    sampler = nuts.SAMPLER
    states = [sampler.init(_start(c), params, seed=11 + c, chain=c) for c in range(CHAINS)]
    got: list[list[Any]] = [[] for _ in range(CHAINS)]
    in_place = 0
    for r in range(rounds):
        batch = [c for c in range(CHAINS) if r >= c * STAGGER]
        chosen = [states[c] for c in batch]
        if batched:
            proposals = ask_many(sampler, chosen, params)
        else:
            proposals = [nuts.ask(s, params) for s in chosen]
        in_place += sum(
            p.kind == "leapfrog" and p.position.tobytes() == states[c].position.tobytes()
            for c, p in zip(batch, proposals, strict=True)
        )
        with np.errstate(over="ignore", invalid="ignore"):  # far out: told -inf
            values = [
                _finite_or_outside(_value(c, p)) for c, p in zip(batch, proposals, strict=True)
            ]
        grads = [_gradient(np.asarray(p.position)) for p in proposals]
        if batched:
            told = tell_many(sampler, chosen, params, proposals, values, gradients=grads)
        else:
            told = [
                nuts.tell_gradient(s, params, p, v, g)
                for s, p, v, g in zip(chosen, proposals, values, grads, strict=True)
            ]
        for c, p, (state, info) in zip(batch, proposals, told, strict=True):
            got[c].append((state, info, p))
            states[c] = reset(state, np.zeros(DIM)) if info.outcome == "outside_support" else state
    return got, in_place


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"metric": "dense", "gradient_check": CHAINS},
        {"metric": "unit", "max_tree_depth": 3},
        # Too long a step: divergences, and trees that end at their first point.
        {"step_size": 1.7, "adapt_step_size": False},
        # Points that overflow: ask hands out the current position in their place.
        {"step_size": 1e300, "adapt_step_size": False, "adapt_metric": False},
    ],
    ids=["diag", "dense-checked", "unit-shallow", "diverging", "overflowing"],
)
def test_nuts_batched_equals_chain_by_chain(options: dict[str, Any]) -> None:
    """nuts' batched ask and tell (``ask_many``, ``tell_gradient_many``) give the
    proposals and steps of ``ask`` and ``tell_gradient`` chain by chain, over whole
    runs: chains at different iterations, tree depths and leaves in one batch, gradient
    checks, initial points told ``-inf`` and leapfrog points outside the support, across
    warm-up."""
    warmup, rounds = 30, 400
    params = nuts.make_params(DIM, options, warmup=warmup)
    expected, _ = _nuts_run(params, rounds, batched=False)
    got, in_place = _nuts_run(params, rounds, batched=True)
    infos = [info for history in got for _, info, _ in history]
    outcomes = {i.outcome for i in infos}
    assert {"initialized", "outside_support", "rejected"} <= outcomes
    assert any(i.iteration > warmup for i in infos)
    if options.get("step_size") == 1e300:
        assert in_place > 0
    else:
        assert {"accepted", "step"} <= outcomes
        assert len({s.tree_depth for history in got for s, _, _ in history}) > 1
    for c in range(CHAINS):
        assert len(got[c]) == len(expected[c])
        for i, (a, b) in enumerate(zip(expected[c], got[c], strict=True)):
            _assert_identical(a, b, f"chain {c}, tell {i}")
            _writeable(a[0], b[0], f"chain {c}, tell {i}")
    if options.get("step_size") == 1.7:
        assert any(s.diverging for history in got for s, _, _ in history)


def test_nuts_takes_the_batched_path() -> None:
    assert nuts.SAMPLER.tell_gradient_many is nuts.tell_gradient_many
    assert nuts.SAMPLER.ask_many is nuts.ask_many


def test_nuts_tell_many_refuses_as_the_first_failing_tell() -> None:
    params = nuts.make_params(DIM, {"gradient_check": 0}, warmup=10)
    states = [nuts.init(np.full(DIM, 0.1), params, seed=1, chain=c) for c in range(3)]
    proposals = ask_many(nuts.SAMPLER, states, params)
    grads = [_gradient(np.asarray(p.position)) for p in proposals]
    values = [_logdensity(np.asarray(p.position)) for p in proposals]
    ready = [
        s for s, _ in tell_many(nuts.SAMPLER, states, params, proposals, values, gradients=grads)
    ]
    proposals = ask_many(nuts.SAMPLER, ready, params)
    grads = [_gradient(np.asarray(p.position)) for p in proposals]
    values = [_logdensity(np.asarray(p.position)) for p in proposals]
    with pytest.raises(ValueError, match="needs the gradient"):
        tell_many(
            nuts.SAMPLER, ready, params, proposals, values, gradients=[grads[0], None, grads[2]]
        )
    with pytest.raises(ValueError, match="log density"):
        tell_many(
            nuts.SAMPLER,
            ready,
            params,
            proposals,
            [values[0], math.nan, values[2]],
            gradients=grads,
        )
    with pytest.raises(ValueError, match="does not belong"):
        stale = Proposal(0, "init", ready[1].position)
        tell_many(
            nuts.SAMPLER,
            ready,
            params,
            [proposals[0], stale, proposals[2]],
            values,
            gradients=grads,
        )
    with pytest.raises(ValueError, match="shape"):
        tell_many(
            nuts.SAMPLER,
            ready,
            params,
            proposals,
            values,
            gradients=[grads[0], grads[1][:2], grads[2]],
        )
