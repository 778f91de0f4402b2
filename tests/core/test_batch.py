"""``core.batch``: many chains stepped together equal the chains stepped one by one, bit
for bit, for every sampler, over runs that cross warm-up and its window ends, with
chains at different iterations in one batch, initial points told ``-inf`` and proposals
outside the support."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.base import Proposal, Sampler, StepInfo, reset
from kameleon.core.batch import ARRAY_PHILOX_MIN, accept_block, ask_many, tell_many
from kameleon.core.rng import Stream, generator
from kameleon.core.samplers import am, rwm
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
