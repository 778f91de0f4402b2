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
    after = sorted(_kernel_acceptance(chain) for chain in range(8))
    # The last quarter of warm-up tunes nu^2 toward 0.234 against the proposal the chain
    # keeps; over 1 000 iterations after it a chain's mean acceptance wanders with the
    # region it is in. Chains 0..7 give 0.048, 0.20 to 0.29 (median 0.22; chain 0's nu^2
    # ended warm-up at 14, seven times the others'); over chains 0..15, two below 0.15,
    # as many as with the preconditioner's rule before (0.11 to 0.33, median 0.25).
    # Before the subsample froze ahead of nu^2, chains 0..3 gave 0.04 to 0.19, two of
    # four below 0.15. The median over eight chains says whether the tuning is right;
    # one chain may be unlucky. 0.47, twice the target, would say nu^2 ended warm-up
    # far too small.
    assert float(np.median(after)) > 0.17, after
    assert sum(a < 0.15 for a in after) <= 2, after
    assert max(after) < 2 * 0.234, after
