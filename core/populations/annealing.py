"""Adaptive annealing's arithmetic on a weighted population: the conditional effective
sample size of a step's incremental weights, the step that keeps it at a set fraction
(by bisection), systematic resampling, and ``log mean exp`` of log weights, with the
machine-independent exp and log (:mod:`core.numerics.arithmetic`): the same bits on every CPU.

``smc`` steps its inverse temperature ``beta`` (incremental weights ``exp(delta l)``)
and, in the likelihood mode, its bridge's ``alpha`` from the reference to the prior
(``exp(delta h)``, ``h = log prior - log ref``) with them.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics import arithmetic
from kameleon.core.numerics.arithmetic import log1

__all__ = [
    "below",
    "conditional_ess",
    "increment",
    "log_mean_exp",
    "next_delta",
    "normalised",
    "systematic_resample",
]

#: Bisection steps for the next inverse temperature: the increment to ``2^-60`` of
#: what is left.
_BISECTIONS = 60
#: The smallest increment of ``beta`` a stage makes (a population whose effective
#: sample size falls at any step still moves on).
_MIN_DELTA = 1e-12


def log_mean_exp(x: FloatArray) -> float:
    """``log mean exp(x)`` (``-inf`` when every entry is), with the module's exp and log:
    the same bits on every CPU."""
    a = np.asarray(x, dtype=np.float64)
    top = float(np.max(a))
    if top == -math.inf:
        return -math.inf
    return top + log1(float(np.add.reduce(arithmetic.exp(below(a, top)))) / a.size)


def normalised(log_weights: FloatArray) -> FloatArray:
    lw = np.asarray(log_weights, dtype=np.float64)
    top = float(np.max(lw))
    w = arithmetic.exp(below(lw, top))
    out: FloatArray = w / float(np.add.reduce(w))
    return out


def below(a: FloatArray, top: float) -> FloatArray:
    """``a - top`` for ``top = max(a)`` finite: a difference past the float range (told
    values near +-1e308) is ``-inf``, a weight of zero, as it is in exact arithmetic to
    within 1e-308."""
    with np.errstate(over="ignore"):
        out: FloatArray = a - top
    return out


def conditional_ess(weights: FloatArray, logliks: FloatArray, delta: float) -> float:
    """The conditional effective sample size, as a fraction of the particles, of the
    incremental weights ``exp(delta l)`` under the normalised ``weights``:
    ``(sum W w)^2 / sum W w^2`` (1 at ``delta = 0``; 0 when every particle has
    ``l = -inf``)."""
    lw = increment(logliks, delta)
    top = float(np.max(lw))
    if top == -math.inf:
        return 0.0
    w = arithmetic.exp(below(lw, top))
    first = float(np.add.reduce(weights * w))
    second = float(np.add.reduce(weights * w * w))
    return first * first / second if second > 0 else 0.0


def increment(logliks: FloatArray, delta: float) -> FloatArray:
    """``delta l``, with ``-inf`` for ``l = -inf`` (and for a particle not evaluated)."""
    ll = np.asarray(logliks, dtype=np.float64)
    finite = np.isfinite(ll)
    out: FloatArray = np.where(finite, delta * np.where(finite, ll, 0.0), -math.inf)
    return out


def next_delta(weights: FloatArray, logliks: FloatArray, left: float, fraction: float) -> float:
    """The increment ``delta`` of ``beta`` (at most ``left``, at least a tiny positive
    number) at which :func:`conditional_ess` is ``fraction``, by bisection; ``left`` when
    the whole step keeps it at or above ``fraction``."""
    if conditional_ess(weights, logliks, left) >= fraction:
        return left
    lo, hi = 0.0, left
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if conditional_ess(weights, logliks, mid) >= fraction:
            lo = mid
        else:
            hi = mid
    return max(lo, min(_MIN_DELTA, left))


def systematic_resample(
    weights: FloatArray, u: float, count: int | None = None
) -> npt.NDArray[np.intp]:
    """The indices that systematic resampling with the uniform ``u`` keeps from the
    normalised ``weights``: ``count`` of them (default ``N``, the weights' size),
    particle ``i`` as many times as the points ``(j + u) / count`` in its slice of the
    cumulative weights (its expected count is ``count W_i``)."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.size
    m = n if count is None else count
    cumulative = np.cumsum(w)
    cumulative[-1] = 1.0  # rounding aside, it is
    points = (np.arange(m) + u) / m
    out: npt.NDArray[np.intp] = np.searchsorted(cumulative, points, side="right")
    return np.minimum(out, n - 1)
