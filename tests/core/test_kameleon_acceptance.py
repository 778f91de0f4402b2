"""KAMH's acceptance after warm-up on a target whose chains start outside its bulk
(BENCHMARKS.md, section 4, "KAMH's acceptance after warm-up").

A 9-d Gaussian with sds 0.6..1.5 centred at 2.5 in every coordinate, chains from the
origin, a warm-up of 1 000 (the target of ``test_preconditioning_far_start.py``). Before
the subsample froze ahead of ``nu^2`` and the nugget scaled with the dimension, the
kernel steps accepted about 0.2 in the last quarter of warm-up and then, with the
frozen proposal, 0.04 to 0.19 over the next 1 000 iterations (seed 1, chains 0..3): ``nu^2``
had been tuned against a growing subsample, and away from the frozen one the proposal
fell to a nugget of a quarter of the random walk's step, where moves were rejected by
the Hastings correction.
"""

from __future__ import annotations

import numpy as np
import pytest

from kameleon.core.samplers import kameleon
from kameleon.core.tuning import preconditioning

DIM = 9
SDS = np.linspace(0.6, 1.5, DIM)
MEAN = np.full(DIM, 2.5)
WARMUP = 1000
AFTER = 1000


def _logdensity(x: np.ndarray) -> float:
    z = (x - MEAN) / SDS
    return -0.5 * float(z @ z)


def _kernel_acceptance(chain: int) -> float:
    """Mean acceptance probability of the kernel method's own steps (not scouting, not
    the mixture's random walk) after warm-up."""
    params = kameleon.make_params(DIM, {}, warmup=WARMUP)
    state = kameleon.init(np.zeros(DIM), params, seed=1, chain=chain)
    after: list[float] = []
    while state.iteration < WARMUP + AFTER:
        kernel_step = (
            state.logdensity is not None
            and state.preconditioner is not None
            and not preconditioning.is_scouting(state, params)
            and not preconditioning.is_random_walk(state, params)
        )
        proposal = kameleon.ask(state, params)
        state, info = kameleon.tell(state, params, proposal, _logdensity(proposal.position))
        if kernel_step and info.iteration > WARMUP:
            after.append(info.acceptance_probability)
    return float(np.mean(after))


@pytest.mark.slow
def test_kernel_steps_keep_accepting_after_warmup() -> None:
    after = [_kernel_acceptance(chain) for chain in range(4)]
    # The last quarter of warm-up tunes nu^2 toward 0.234 against the proposal the chain
    # keeps; over 1 000 iterations after it a chain's mean acceptance wanders with the
    # region it is in: 0.22..0.33 in these four chains, 0.04..0.19 before. 0.15 is
    # between the two (before, two chains are below it: 0.13 and 0.04); 0.47, twice the
    # target, would say nu^2 ended warm-up far too small.
    assert min(after) > 0.15, after
    assert max(after) < 2 * 0.234, after
