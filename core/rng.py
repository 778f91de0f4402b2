"""Counter-based randomness.

Every random number a sampler uses is a pure function of ``(seed, chain, iteration,
stream)``: a Philox generator (Salmon et al. 2011, "Parallel random numbers: as easy as
1, 2, 3") keyed by ``(seed, chain)`` with its counter set from ``(iteration, stream)``.
Nothing random is kept in a sampler's state, so asking twice from the same state gives
the same proposal, and a chain can be replayed bit for bit from its seed and told values.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

__all__ = ["Stream", "generator", "MAX_SEED"]

MAX_SEED = 2**63 - 1


class Stream(IntEnum):
    """Independent streams within one iteration."""

    PROPOSE = 0
    ACCEPT = 1
    ADAPT = 2
    SETUP = 3  # draws made once per chain (e.g. random Fourier features)


def generator(seed: int, chain: int, iteration: int, stream: Stream | int) -> np.random.Generator:
    """A generator that depends only on its arguments.

    Parameters
    ----------
    seed, chain
        Key of the Philox generator: one independent family of streams per chain.
    iteration, stream
        The counter: one independent stream per iteration and purpose.
    """
    if not (0 <= seed <= MAX_SEED and chain >= 0 and iteration >= 0 and stream >= 0):
        raise ValueError("seed, chain, iteration and stream must be non-negative")
    key = np.array([seed, chain], dtype=np.uint64)
    counter = np.array([0, 0, int(stream), iteration], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))
