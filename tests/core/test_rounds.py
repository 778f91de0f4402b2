"""``core.populations.rounds``: a round's proposals, asked from the state before any of them is told,
are the proposals ``ask`` gives once the ones before them are told, whatever their values,
bit for bit, for every sampler that has rounds, over runs that cross warm-up's end, stage
ends, sweeps and window ends, with evaluations outside the support; and the round
shrinks by one with each evaluation told within it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import Parts, Proposal
from kameleon.core.interface.sampler import tell_one
from kameleon.core.populations import rounds

DIM = 3


def _parts(x: np.ndarray) -> tuple[float, float]:
    """A Gaussian prior and a likelihood, both cut at ``x[0] > -1.2`` (``-inf``
    beyond: outside the support)."""
    if x[0] <= -1.2:
        return -math.inf, -math.inf
    prior = -0.5 * float(x @ x) / 4.0
    # Narrow (sd about 0.2) against smc's reference: its tempering takes stages.
    return prior, -12.5 * float((x - 0.5) @ (x - 0.5)) - 0.3 * float(x[0] * x[1])


def _same(a: Proposal, b: Proposal) -> bool:
    return (
        (a.iteration, a.step, a.kind) == (b.iteration, b.step, b.kind)
        and a.position.tobytes() == b.position.tobytes()
        and a.log_correction == b.log_correction
    )


CASES = [
    ("ensemble", {}, 80),
    ("ensemble", {"split": "random", "de_probability": 0.3, "walkers": 10}, 75),
    ("smc", {"particles": 8}, 203),
    ("smc", {"particles": 8, "tempered": "likelihood", "moves": 1, "mixing": 0.2}, 150),
    ("smc", {"particles": 6, "mixing": 0}, 5),  # warm-up ends inside the first sweep
    ("smc", {"particles": 8}, 21),  # the tempering forced to its end inside a sweep
    # Waste-free stages: a round is one step of the chains; the warm-up's stages at
    # beta = 1 then begin inside a sweep. With a reference narrower than the prior, the
    # bridge's stages are waste-free too; warm-up ends inside a stage's chains at beta
    # = 1, and inside them at beta < 1 (the step to 1 forced).
    ("smc", {"particles": 8, "waste_free": 4}, 203),
    (
        "smc",
        {"particles": 8, "waste_free": 2, "tempered": "likelihood", "reference_sd": 0.5},
        150,
    ),
    ("smc", {"particles": 12, "waste_free": 3}, 50),
    ("smc", {"particles": 12, "waste_free": 3}, 30),
    ("tempering", {"temperatures": 4}, 60),
    ("tempering", {"temperatures": 3, "tempered": "likelihood"}, 45),
    ("importance", {"particles": 5}, 40),
    ("importance", {"particles": 1}, 30),
]


@pytest.mark.parametrize(("name", "options", "warmup"), CASES)
def test_round_proposals_are_the_asks_after_their_predecessors(
    name: str, options: dict[str, Any], warmup: int
) -> None:
    sampler = SAMPLERS[name]
    params = sampler.make_params(DIM, options, warmup=warmup)
    likelihood = options.get("tempered") == "likelihood"
    state = sampler.init(np.full(DIM, 0.3), params, seed=5, chain=2)
    predicted: list[Proposal] = []
    left = 0
    checked = rounds_seen = longest = 0
    while state.iteration < 2 * warmup + 40:
        proposal = sampler.ask(state, params)
        size = rounds.size(sampler, state, params)
        if predicted:
            assert _same(predicted.pop(0), proposal), (state.iteration, proposal.step)
            assert size == left, (state.iteration, size, left)
            checked += 1
        else:
            whole = rounds.proposals(sampler, state, params)
            assert len(whole) == size >= 1
            assert _same(whole[0], proposal)
            predicted = whole[1:]
            rounds_seen += 1
            longest = max(longest, size)
        left = size - 1
        prior, loglik = _parts(np.asarray(proposal.position))
        value = prior + loglik
        parts = Parts(prior, loglik, np.zeros(DIM), np.zeros(DIM)) if likelihood else None
        state, _ = tell_one(sampler, state, params, proposal, value, None, parts)
    assert not predicted or state.iteration >= 2 * warmup + 40
    assert checked > 0 or longest == 1
    # The longest round: the walkers' placements (iterations 1 to W - 1), a sweep, the
    # ladder, a round of draws.
    expected = {
        "ensemble": lambda: params.size - 1,
        "smc": lambda: params.particles,
        "tempering": lambda: params.temperatures,
        "importance": lambda: params.particles,
    }[name]()
    assert longest == expected


def test_round_offsets() -> None:
    sampler = SAMPLERS["tempering"]
    params = sampler.make_params(DIM, {"temperatures": 4}, warmup=10)
    state = sampler.init(np.zeros(DIM), params, seed=1, chain=0)
    state, _ = tell_one(sampler, state, params, sampler.ask(state, params), -1.0)
    outstanding = sampler.ask(state, params)
    assert rounds.offset(sampler, state, outstanding, 1, 0) == 0
    assert rounds.offset(sampler, state, outstanding, 1, 3) == 3
    assert rounds.offset(sampler, state, outstanding, 2, 0) > rounds.size(sampler, state, params)
    ens = SAMPLERS["ensemble"]
    eparams = ens.make_params(DIM, {}, warmup=10)
    estate = ens.init(np.zeros(DIM), eparams, seed=1, chain=0)
    estate, _ = tell_one(ens, estate, eparams, ens.ask(estate, eparams), -1.0)
    first = ens.ask(estate, eparams)
    assert rounds.offset(ens, estate, first, 4, 0) == 3
    assert rounds.offset(ens, estate, first, 1, 1) > 1000  # a step this sampler never issues


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_without_rounds_hand_out_one(name: str) -> None:
    sampler = SAMPLERS[name]
    assert (sampler.round_size is None) == (sampler.ask_ahead is None)
    if sampler.round_size is not None:
        return
    params = sampler.make_params(DIM, {"data_size": 10} if name == "sgld" else {}, warmup=10)
    state = sampler.init(np.zeros(DIM), params, seed=1, chain=0)
    assert rounds.size(sampler, state, params) == 1
