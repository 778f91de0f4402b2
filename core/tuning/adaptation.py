"""Adaptation building blocks shared by the samplers.

Two modes, chosen per session with the ``adaptation`` option:

``"warmup"``
    Adapt during the warm-up iterations only, then freeze (the papers' choice); the
    post-warm-up chain is an ordinary, exact Markov chain.
``"diminishing"``
    Keep adapting, each iteration with probability ``p_t = min(1, (t - t0 + 1)^-kappa)``
    (``0 < kappa <= 1``: ``p_t -> 0`` and ``sum p_t = inf``), which keeps the chain
    ergodic under diminishing adaptation (Roberts and Rosenthal 2007).

Robbins-Monro updates use the clipped acceptance probability ``min(1, alpha)``, never
the raw ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kameleon.core.interface.chain import FloatArray, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.numerics.arithmetic import pow1

__all__ = [
    "MAX_VARIANCE",
    "Welford",
    "adapt_probability",
    "learning_rate",
    "robbins_monro",
    "usable_covariance",
]


MAX_VARIANCE = 1e100
"""The largest variance an adapted proposal covariance may have (a standard deviation of
``1e50``): an estimate beyond it, or not finite, is not used, and the proposal keeps the
covariance it had. A proper target with a finite scale never comes near; a flat or
unbounded one (an improper target) would otherwise widen the proposal without end, from
one adaptation window to the next, until the arithmetic overflows. Within this bound a
chain's positions stay far from the float range (their squares stay finite)."""


def usable_covariance(sigma: FloatArray) -> bool:
    """Whether the estimated covariance ``sigma`` may become a proposal's: finite, and
    no variance above :data:`MAX_VARIANCE`."""
    return bool(np.all(np.isfinite(sigma)) and np.all(np.diagonal(sigma) <= MAX_VARIANCE))


def adapt_probability(
    iteration: int, *, warmup: int, mode: str, start: int = 0, kappa: float = 0.5
) -> float:
    """Probability that iteration ``iteration`` (1-based) adapts.

    Nothing adapts before ``start``. In ``"warmup"`` mode every warm-up iteration adapts
    and none after; in ``"diminishing"`` mode iteration ``t`` adapts with probability
    ``(t - start)^-kappa``.
    """
    if iteration <= start:
        return 0.0
    if mode == "warmup":
        return 1.0 if iteration <= warmup else 0.0
    return min(1.0, pow1(iteration - start, -kappa))


def learning_rate(iteration: int, start: int = 0, exponent: float = 0.5) -> float:
    """Robbins-Monro gain ``(t - start)^-exponent`` for ``t > start``, else 0."""
    if iteration <= start:
        return 0.0
    return pow1(iteration - start, -exponent)


def robbins_monro(
    log_scale: float, acceptance_probability: float, target: float, rate: float
) -> float:
    """``log s <- log s + rate * (min(1, alpha) - target)``, kept within a sane range."""
    alpha = min(1.0, max(0.0, acceptance_probability))
    return min(50.0, max(-50.0, log_scale + rate * (alpha - target)))


@register("adaptation.Welford")
@dataclass(frozen=True, slots=True)
class Welford:
    """Running mean and covariance (Welford's algorithm), O(d^2) memory.

    ``m2`` is the sum of outer products of deviations; the covariance is ``m2 / (n - 1)``.
    """

    count: int
    mean: FloatArray
    m2: FloatArray

    @staticmethod
    def empty(dim: int) -> Welford:
        return Welford(0, frozen_array(np.zeros(dim)), frozen_array(np.zeros((dim, dim))))

    def update(self, x: FloatArray) -> Welford:
        n = self.count + 1
        # A position near the float range (told by a client, or reached on an improper
        # target) overflows to an infinite estimate, which its users do not use
        # (usable_covariance): silently, not as a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            delta = x - self.mean
            mean = self.mean + delta / n
            m2 = self.m2 + np.outer(delta, x - mean)
        return Welford(n, frozen_array(mean), frozen_array(m2))

    def covariance(self) -> FloatArray:
        if self.count < 2:
            return np.full_like(self.m2, math.nan)
        return self.m2 / (self.count - 1)
