"""Counter-based randomness.

Every random number a sampler uses is a pure function of ``(seed, chain, iteration,
stream)``: a Philox generator (Salmon et al. 2011, "Parallel random numbers: as easy as
1, 2, 3") keyed by ``(seed, chain)`` with its counter set from ``(iteration, stream)``.
Nothing random is kept in a sampler's state, so asking twice from the same state gives
the same proposal, and a chain can be replayed bit for bit from its seed and told values.
"""

from __future__ import annotations

import threading
from enum import IntEnum
from typing import Any

import numpy as np

__all__ = ["MAX_SEED", "Stream", "fresh_generator", "generator", "substream"]

MAX_SEED = 2**63 - 1


class Stream(IntEnum):
    """Independent streams within one iteration."""

    PROPOSE = 0
    ACCEPT = 1
    ADAPT = 2
    SETUP = 3  # draws made once per chain (e.g. random Fourier features)
    INIT = 4  # starting points; the counter is the attempt, not the iteration
    MIX = 5  # which kernel of a mixture an iteration uses
    SPLIT = 6  # how an ensemble's walkers are split in two halves (the counter: the sweep)


def substream(stream: Stream | int, step: int) -> int:
    """The stream of ``stream``'s draws at the ``step``-th evaluation (from 0) of a
    transition that needs several (a leapfrog point, a gradient check): independent of
    every :class:`Stream` and of each other step's (a Philox counter word holds 64 bits)."""
    if step < 0:
        raise ValueError("step must be non-negative")
    return int(stream) + 64 * (step + 1)


_local = threading.local()


class _Reusable:
    """One Philox generator whose key and counter are set in place, and the state
    document that sets them (built once: assigning it is what costs)."""

    def __init__(self) -> None:
        self.key = np.zeros(2, dtype=np.uint64)
        self.counter = np.zeros(4, dtype=np.uint64)
        self.bits = np.random.Philox(key=self.key)
        self.generator = np.random.Generator(self.bits)
        self.document: Any = {
            "bit_generator": "Philox",
            "state": {"counter": self.counter, "key": self.key},
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }

    def reset(self, seed: int, chain: int, iteration: int, stream: int) -> np.random.Generator:
        self.key[0], self.key[1] = seed, chain
        self.counter[2], self.counter[3] = stream, iteration
        self.bits.state = self.document
        return self.generator


#: The pool's slot that every substream shares.
_SUBSTREAMS = -1


def _reusable(stream: int) -> _Reusable:
    pool: dict[int, _Reusable] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    reusable = pool.get(stream)
    if reusable is None:
        reusable = pool[stream] = _Reusable()
    return reusable


def generator(seed: int, chain: int, iteration: int, stream: Stream | int) -> np.random.Generator:
    """A generator that depends only on its arguments.

    Parameters
    ----------
    seed, chain
        Key of the Philox generator: one independent family of streams per chain.
    iteration, stream
        The counter: one independent stream per iteration and purpose.

    Notes
    -----
    Building a Philox generator costs more than a Metropolis step, so each thread keeps
    one per stream and resets its key and counter here. The generator returned is
    therefore valid until the next call with the same ``stream`` in the same thread (for
    a substream, :func:`substream`, the next call for any substream): draw what you need
    from it before asking for another.
    """
    if not (0 <= seed <= MAX_SEED and chain >= 0 and iteration >= 0 and stream >= 0):
        raise ValueError("seed, chain, iteration and stream must be non-negative")
    # A substream (64 and above) shares one kept generator with every other substream:
    # one kept per stream would grow without bound. It is valid until the next call for
    # any substream.
    slot = int(stream) if stream < 64 else _SUBSTREAMS
    return _reusable(slot).reset(seed, chain, iteration, int(stream))


def fresh_generator(
    seed: int, chain: int, iteration: int, stream: Stream | int
) -> np.random.Generator:
    """Like :func:`generator`, but a new object that no later call touches."""
    key = np.array([seed, chain], dtype=np.uint64)
    counter = np.array([0, 0, int(stream), iteration], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))
