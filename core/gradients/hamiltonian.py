"""What the Hamiltonian samplers (HMC, NUTS) share: the kinetic energy of a momentum
under an inverse metric, momentum draws, one leapfrog step split at its log-density
evaluation, and the U-turn test (what every gradient sampler shares is in
:mod:`core.gradients.chain`).

The inverse metric ``metric`` (the covariance shape of the positions the sampler moves
along; ``M^-1`` of the mass matrix ``M``) is a vector ``(d,)`` (diagonal) or a matrix
``(d, d)`` (dense). The momentum is ``p ~ N(0, M)``; the kinetic energy ``p^T M^-1 p / 2``;
the Hamiltonian ``H = -log pi(q) + K(p)``.

A leapfrog step ``(q, p, g) -> (q', p', g')`` with step ``eps`` (negative: backward in
time) needs the gradient at ``q'``, which a client evaluates: it is split in two,
:func:`leapfrog_position` (``p_half = p + eps/2 g``, ``q' = q + eps M^-1 p_half``,
before the evaluation, in ``ask``) and :func:`leapfrog_momentum` (``p' = p_half + eps/2
g'``, in ``tell``). Both are pure functions of the state, so ``tell`` recomputes what
``ask`` handed out instead of storing it (NUTS takes ``q'`` from the proposal and
recomputes only ``p_half``, :func:`half_momentum`).

All arithmetic goes through :mod:`core.numerics.arithmetic` (the same bits on every CPU).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.matrices import cholesky, dot, matvec, solve_upper

__all__ = [
    "DIVERGENCE",
    "draw_momentum",
    "half_momentum",
    "is_turning",
    "kinetic_energies",
    "kinetic_energy",
    "leapfrog_momenta",
    "leapfrog_momentum",
    "leapfrog_position",
    "leapfrog_positions",
    "log_add_exp",
    "turnings",
    "velocity",
]

#: An energy error ``H - H0`` above this ends a trajectory as a divergence (Stan's 1000).
DIVERGENCE = 1000.0


def velocity(momentum: FloatArray, metric: FloatArray) -> FloatArray:
    """``M^-1 p``."""
    if metric.ndim == 2:
        return matvec(metric, momentum)
    out: FloatArray = metric * momentum
    return out


def kinetic_energy(momentum: FloatArray, metric: FloatArray) -> float:
    """``p^T M^-1 p / 2`` (``inf`` when it overflows or the momentum is not finite)."""
    with np.errstate(over="ignore", invalid="ignore"):
        value = 0.5 * dot(momentum, velocity(momentum, metric))
    return value if math.isfinite(value) else math.inf


def draw_momentum(rng: np.random.Generator, metric: FloatArray) -> FloatArray:
    """A momentum ``p ~ N(0, M)`` for the inverse metric ``metric``: ``z / sqrt(m)`` for
    a diagonal one, ``C^-T z`` for a dense one with ``metric = C C^T`` (whose covariance
    is ``C^-T C^-1 = M``)."""
    z: FloatArray = np.asarray(rng.standard_normal(metric.shape[0]), dtype=np.float64)
    if metric.ndim == 2:
        return solve_upper(cholesky(metric).T.copy(), z)
    out: FloatArray = z / np.sqrt(metric)
    return out


def leapfrog_position(
    position: FloatArray,
    momentum: FloatArray,
    gradient: FloatArray,
    step: float,
    metric: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """The first half of a leapfrog step: ``(q', p_half)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        half = momentum + (0.5 * step) * gradient
        new = position + step * velocity(half, metric)
    return new, half


def half_momentum(momentum: FloatArray, gradient: FloatArray, step: float) -> FloatArray:
    """``p_half`` of :func:`leapfrog_position` alone (the same bits), for a ``tell`` that
    has the point ``q'`` that ``ask`` computed."""
    with np.errstate(over="ignore", invalid="ignore"):
        half: FloatArray = momentum + (0.5 * step) * gradient
    return half


def leapfrog_momentum(half: FloatArray, gradient: FloatArray, step: float) -> FloatArray:
    """The second half of a leapfrog step: ``p' = p_half + eps/2 g'``."""
    with np.errstate(over="ignore", invalid="ignore"):
        out: FloatArray = half + (0.5 * step) * gradient
    return out


def leapfrog_momenta(momenta: FloatArray, gradients: FloatArray, steps: FloatArray) -> FloatArray:
    """:func:`half_momentum` (or :func:`leapfrog_momentum`) of many chains at once: row
    ``i`` is ``momenta[i] + (steps[i] / 2) gradients[i]``, the same bits as the one-chain
    function gives, for ``momenta`` and ``gradients`` of shape ``(k, d)`` and ``steps``
    ``(k,)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        out: FloatArray = momenta + (0.5 * steps)[:, None] * gradients
    return out


def leapfrog_positions(
    positions: FloatArray, halves: FloatArray, steps: FloatArray, metrics: FloatArray
) -> FloatArray:
    """The new positions of :func:`leapfrog_position` for many chains at once, the same
    bits: row ``i`` is ``positions[i] + steps[i] M_i^-1 halves[i]``, with ``halves`` from
    :func:`leapfrog_momenta` and ``metrics`` as in :func:`kinetic_energies`."""
    with np.errstate(over="ignore", invalid="ignore"):
        out: FloatArray = positions + steps[:, None] * _velocities(halves, metrics)
    return out


def _velocities(momenta: FloatArray, metrics: FloatArray) -> FloatArray:
    """:func:`velocity` of many chains: rows of ``M_i^-1 p_i`` (see :func:`kinetic_energies`)."""
    if metrics.ndim == 3:
        out: FloatArray = np.add.reduce(np.multiply(metrics, momenta[:, None, :]), axis=-1)
    else:
        out = metrics * momenta
    return out


def kinetic_energies(momenta: FloatArray, metrics: FloatArray) -> FloatArray:
    """:func:`kinetic_energy` of many chains at once, the same bits: ``momenta`` of shape
    ``(k, d)``, ``metrics`` ``(k, d)`` (diagonal) or ``(k, d, d)`` (dense). Each row's
    products are added along the row's contiguous last axis, as :func:`core.numerics.matrices.dot`
    and :func:`~core.numerics.matrices.matvec` add a vector's, in numpy's pairwise order."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = 0.5 * np.add.reduce(np.multiply(momenta, _velocities(momenta, metrics)), axis=-1)
    out: FloatArray = np.where(np.isfinite(values), values, math.inf)
    return out


def is_turning(
    momentum_left: FloatArray,
    momentum_right: FloatArray,
    momentum_sum: FloatArray,
    metric: FloatArray,
) -> bool:
    """The generalised U-turn criterion (Betancourt 2017): a trajectory from the state
    with ``momentum_left`` to the one with ``momentum_right`` whose momenta add up to
    ``momentum_sum`` (``rho``) turns when ``rho . M^-1 p`` is not positive at either
    end. Symmetric in the two ends, so it holds for a trajectory built backward."""
    left = dot(velocity(momentum_left, metric), momentum_sum)
    right = dot(velocity(momentum_right, metric), momentum_sum)
    # Not a number (an overflowed sum) turns: the trajectory ends rather than goes on.
    return not (left > 0.0 and right > 0.0)


def turnings(
    momenta_left: FloatArray,
    momenta_right: FloatArray,
    momentum_sums: FloatArray,
    metrics: FloatArray,
) -> npt.NDArray[np.bool_]:
    """:func:`is_turning` of many tests at once, the same answers: row ``i`` of each
    array is a test, ``metrics`` as in :func:`kinetic_energies`."""
    with np.errstate(over="ignore", invalid="ignore"):
        left = np.add.reduce(
            np.multiply(_velocities(momenta_left, metrics), momentum_sums), axis=-1
        )
        right = np.add.reduce(
            np.multiply(_velocities(momenta_right, metrics), momentum_sums), axis=-1
        )
    out: npt.NDArray[np.bool_] = ~((left > 0.0) & (right > 0.0))
    return out


def log_add_exp(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` with :func:`core.numerics.arithmetic.exp1` and ``log1``."""
    high, low = (a, b) if a >= b else (b, a)
    if low == -math.inf:
        return high
    return high + log1(1.0 + exp1(low - high))
