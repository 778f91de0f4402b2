"""Reservoir sampling of a chain's history (Vitter 1985, "Random sampling with a
reservoir", Algorithm R).

A reservoir of capacity ``n`` holds a uniform random subsample, without replacement,
of all the rows offered so far, in ``O(n d)`` memory however long the stream is. Rows
are immutable: an update returns a new read-only array when (and only when) a row
changes, and the same array object otherwise, so a store can tell unchanged
reservoirs apart by identity.
"""

from __future__ import annotations

import numpy as np

from kameleon.core.interface.chain import FloatArray, frozen_array

__all__ = ["reservoir_update"]


def reservoir_update(
    rows: FloatArray, count: int, x: FloatArray, capacity: int, rng: np.random.Generator
) -> FloatArray:
    """Offer the ``count + 1``-th row ``x`` to a reservoir.

    Parameters
    ----------
    rows
        The reservoir after ``count`` offers: shape ``(min(count, capacity), d)``.
    count
        How many rows were offered before ``x``.
    x
        The new row, shape ``(d,)``.
    capacity
        The reservoir's size ``n >= 1``.
    rng
        Chooses whether and where ``x`` replaces a row (unused while the reservoir
        fills up).

    Returns
    -------
    ndarray
        The reservoir after ``count + 1`` offers: ``rows`` itself when ``x`` is not
        kept, otherwise a new read-only array (an ``O(n d)`` copy).
    """
    if rows.shape[0] != min(count, capacity):
        raise ValueError("the reservoir's size does not match its count")
    if count < capacity:
        return frozen_array(np.vstack([rows, x]))
    slot = int(rng.integers(count + 1))
    if slot >= capacity:
        return rows
    new = rows.copy()
    new[slot] = x
    new.flags.writeable = False
    return new
