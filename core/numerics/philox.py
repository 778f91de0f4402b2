"""Philox4x64-10 over arrays: the random numbers of many chains in a few numpy operations.

:func:`core.numerics.rng.generator` gives one chain's stream for one iteration as a numpy
``Generator`` on a ``Philox`` bit generator keyed by ``(seed, chain)`` with the counter
``(0, 0, stream, iteration)``. Stepping 256 chains that way means 256 Python calls that
each set a generator's key and counter. Philox is a counter-based generator (Salmon,
Moraes, Dror and Shaw 2011, "Parallel random numbers: as easy as 1, 2, 3"): block ``b``
of a stream is a fixed function of the key and the counter ``(b, 0, stream, iteration)``,
ten rounds of two 64 x 64 -> 128-bit multiplications and some xors. That function is
computed here on arrays, one element per chain, so that one iteration's numbers for all
chains come out together, equal bit for bit to what the per-chain generators give
(``tests/core/test_philox.py`` checks it against numpy's ``Philox``).

numpy's ``Philox`` increments the counter before it computes a block, so the first block
of a fresh generator is the one for counter word ``1``, and it hands out the four words
of a block in order. ``Generator.random`` turns a word ``w`` into ``(w >> 11) * 2**-53``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["raw", "uniforms"]

U64 = npt.NDArray[np.uint64]

# The constants of Philox4x64 (Salmon et al. 2011, table 2): round multipliers and the
# Weyl sequence that bumps the key between rounds.
_M0, _M1 = np.uint64(0xD2E7470EE14C6C93), np.uint64(0xCA5A826395121157)
_W0, _W1 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBB67AE8584CAA73B)
_LOW, _SHIFT = np.uint64(0xFFFFFFFF), np.uint64(32)
_ROUNDS = 10
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53


def _mulhilo(a: U64, m: np.uint64) -> tuple[U64, U64]:
    """The high and low 64-bit words of the 128-bit product ``a * m``, from 32-bit halves
    (numpy has no 128-bit integers; uint64 products wrap, which is the low word)."""
    a_lo, a_hi = a & _LOW, a >> _SHIFT
    m_lo, m_hi = m & _LOW, m >> _SHIFT
    lo_lo, lo_hi, hi_lo = a_lo * m_lo, a_lo * m_hi, a_hi * m_lo
    middle = (lo_lo >> _SHIFT) + (lo_hi & _LOW) + (hi_lo & _LOW)
    high = a_hi * m_hi + (lo_hi >> _SHIFT) + (hi_lo >> _SHIFT) + (middle >> _SHIFT)
    return high, a * m


def _blocks(key0: U64, key1: U64, c0: U64, c2: U64, c3: U64) -> U64:
    """Philox4x64-10 of the counters ``(c0, 0, c2, c3)`` under the keys; the four output
    words stacked on a new last axis. Inputs broadcast against each other."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as Philox means it to
        k0, k1 = key0, key1
        x0, x1, x2, x3 = np.broadcast_arrays(c0, np.uint64(0), c2, c3)
        for r in range(_ROUNDS):
            if r:
                k0, k1 = k0 + _W0, k1 + _W1
            hi0, lo0 = _mulhilo(x0, _M0)
            hi1, lo1 = _mulhilo(x2, _M1)
            x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
    return np.stack(np.broadcast_arrays(x0, x1, x2, x3), axis=-1)


def raw(
    seed: npt.ArrayLike, chain: npt.ArrayLike, iteration: npt.ArrayLike, stream: int, count: int
) -> U64:
    """The first ``count`` 64-bit words of each chain's stream, shape ``(n, count)``.

    Row ``i`` equals ``core.numerics.rng.generator(seed[i], chain[i], iteration[i],
    stream).bit_generator.random_raw(count)``; ``seed``, ``chain`` and ``iteration``
    broadcast to one shape ``(n,)``.
    """
    seeds, chains, iterations = (
        np.asarray(a, dtype=np.uint64).reshape(-1, 1)
        for a in np.broadcast_arrays(
            np.asarray(seed, dtype=np.uint64),
            np.asarray(chain, dtype=np.uint64),
            np.asarray(iteration, dtype=np.uint64),
        )
    )
    n_blocks = -(-count // 4)
    counters = np.arange(1, n_blocks + 1, dtype=np.uint64).reshape(1, -1)
    words = _blocks(seeds, chains, counters, np.full(1, stream, dtype=np.uint64), iterations)
    return words.reshape(len(seeds), 4 * n_blocks)[:, :count]


def uniforms(
    seed: npt.ArrayLike, chain: npt.ArrayLike, iteration: npt.ArrayLike, stream: int, count: int
) -> npt.NDArray[np.float64]:
    """Uniforms on ``[0, 1)``, shape ``(n, count)``: row ``i`` equals
    ``core.numerics.rng.generator(seed[i], chain[i], iteration[i], stream).random(count)``."""
    words = raw(seed, chain, iteration, stream, count) >> np.uint64(11)
    return words.astype(np.float64) * _TO_UNIT
