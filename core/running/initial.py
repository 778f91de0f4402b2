"""Over-dispersed starting points, and new ones for a start outside the support.

Chains that all start at one point cannot show, by disagreeing, that they have not
forgotten it (split R-hat compares chains). So without a user-given initial point each
chain starts at a point drawn uniformly from the box ``(-2, 2)^dim``, as Stan does; with a
user-given ``center`` and a ``radius``, from ``center ± radius``; with a ``center`` and no
``radius``, exactly at ``center``.

A drawn starting point whose log density is ``-inf`` is replaced by the next draw
(:func:`redraw`), up to ``max_attempts`` points per chain. Draws are pure functions of
``(seed, chain, attempt)`` (the :data:`core.numerics.rng.Stream.INIT` stream, counter = attempt), so
the service and :func:`core.running.inprocess.sample` start their chains at the same points, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray, frozen_array, reset
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RADIUS",
    "initial_point",
    "redraw",
    "start_radius",
]

#: Half-width of the box starting points are drawn from when no initial point is given.
DEFAULT_RADIUS = 2.0
#: Starting points drawn per chain, the first included, before a chain waits for one.
DEFAULT_MAX_ATTEMPTS = 100


def start_radius(has_initial: bool, radius: float | None) -> float | None:
    """The half-width of the box a chain's starting points are drawn from, or ``None``
    when its given initial point is used exactly (and never replaced).

    ``has_initial``: whether the user gave an initial point; ``radius``: the half-width
    they asked for, if any (positive and finite).
    """
    if radius is not None and not (math.isfinite(radius) and radius > 0):
        raise ValueError("the initial radius must be positive and finite")
    if radius is None and not has_initial:
        return DEFAULT_RADIUS
    return radius


def initial_point(
    dim: int,
    *,
    seed: int,
    chain: int,
    attempt: int,
    center: npt.ArrayLike | None = None,
    radius: float = DEFAULT_RADIUS,
) -> FloatArray:
    """The ``attempt``-th starting point of ``chain``: uniform on ``center ± radius`` per
    coordinate (``center`` defaults to the origin). A pure function of its arguments."""
    u = generator(seed, chain, attempt, Stream.INIT).random(dim)
    offset = radius * (2.0 * u - 1.0)
    if center is None:
        return frozen_array(offset)
    c = np.asarray(center, dtype=np.float64)
    if c.shape != (dim,):
        raise ValueError(f"center must have shape ({dim},)")
    return frozen_array(c + offset)


def redraw(
    state: Any,
    *,
    center: npt.ArrayLike | None,
    radius: float | None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Any:
    """After a drawn starting point was told ``-inf``: ``state`` moved to the next drawn
    point (its epoch, which numbers the attempts, bumped by :func:`core.interface.chain.reset`), or
    ``None`` when the start is not drawn (``radius`` is ``None``) or ``max_attempts``
    points were tried."""
    attempt = state.epoch + 1
    if radius is None or attempt >= max_attempts:
        return None
    point = initial_point(
        state.position.size,
        seed=state.seed,
        chain=state.chain,
        attempt=attempt,
        center=center,
        radius=radius,
    )
    return reset(state, point)
