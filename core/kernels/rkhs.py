"""Gaussian RKHS kernel pieces shared by the kernel-adaptive samplers.

One bandwidth convention throughout: the Gaussian kernel with bandwidth ``l`` is

    k(x, y) = exp(-||x - y||^2 / (2 l^2)),

so ``l`` is a length scale in the units of ``x``. Samplers that follow papers with other
conventions (``exp(-||x - y||^2 / sigma)``) convert at the point of use.

The median heuristic follows the MCMC Kameleon reference (Sejdinovic et al. 2014,
"Kernel adaptive Metropolis-Hastings"): ``l = median / sqrt(2)``, where ``median`` is
the median pairwise Euclidean distance, so that ``k(x, y) = exp(-||x - y||^2 / median^2)``.
"""

from __future__ import annotations

import math

import numpy as np

from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics.arithmetic import exp
from kameleon.core.numerics.matrices import pairwise_distances, squared_distances

__all__ = ["gaussian_kernel", "gaussian_kernel_grad", "median_bandwidth"]


def median_bandwidth(
    points: FloatArray, rng: np.random.Generator | None = None, max_points: int = 1000
) -> float:
    """Bandwidth ``l = median / sqrt(2)`` from the median pairwise distance of ``points``.

    Parameters
    ----------
    points
        Shape ``(n, d)``.
    rng
        Used to choose ``max_points`` rows without replacement when ``n > max_points``;
        without it, the first ``max_points`` rows are used.
    max_points
        At most this many rows enter the ``O(max_points^2 d)`` computation.

    Returns
    -------
    float
        The bandwidth ``l`` of ``exp(-||x - y||^2 / (2 l^2))``.

    Raises
    ------
    ValueError
        If fewer than two of the (chosen) points are distinct.

    Notes
    -----
    Pairs of identical points are left out of the median: a Markov chain's history
    repeats every rejected point, and counting those zero distances would shrink the
    bandwidth with the rejection rate rather than with the spread of the points.
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise ValueError("points must have shape (n, d)")
    if pts.shape[0] > max_points:
        if rng is None:
            pts = pts[:max_points]
        else:
            pts = pts[rng.choice(pts.shape[0], size=max_points, replace=False)]
    distances = pairwise_distances(pts) if pts.shape[0] >= 2 else np.empty(0)
    distances = distances[distances > 0.0]
    if distances.size == 0:
        raise ValueError("the median heuristic needs at least two distinct points")
    return float(np.median(distances)) / math.sqrt(2.0)


def gaussian_kernel(X: FloatArray, Y: FloatArray, bandwidth: float) -> FloatArray:
    """Kernel matrix ``K[i, j] = exp(-||X_i - Y_j||^2 / (2 l^2))``.

    Parameters
    ----------
    X, Y
        Shapes ``(m, d)`` and ``(n, d)``.
    bandwidth
        The length scale ``l > 0``.

    Returns
    -------
    ndarray
        Shape ``(m, n)``.
    """
    sq = squared_distances(X, Y)
    return exp(sq / (-2.0 * bandwidth * bandwidth))


def gaussian_kernel_grad(x: FloatArray, Z: FloatArray, bandwidth: float) -> FloatArray:
    """Gradients ``grad_x k(x, z_i) = k(x, z_i) (z_i - x) / l^2``, one row per ``z_i``.

    Parameters
    ----------
    x
        Shape ``(d,)``.
    Z
        Shape ``(n, d)``.
    bandwidth
        The length scale ``l > 0``.

    Returns
    -------
    ndarray
        Shape ``(n, d)``; ``O(n d)`` time and memory.
    """
    diff = Z - x
    inv_l2 = 1.0 / (bandwidth * bandwidth)
    k = exp(np.add.reduce(diff * diff, axis=-1) * (-0.5 * inv_l2))
    diff *= (k * inv_l2)[:, None]
    return diff
