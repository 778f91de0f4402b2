"""How a warm-up window's covariance updates the preconditioner's estimate: shrunk toward
the previous estimate, by a rule that does not depend on the coordinates
(:mod:`core.tuning.preconditioning` uses it at the end of each window and for the
scouting proposal's running estimate).

:func:`window_weight` is the window's weight ``a`` against the previous estimate,
:func:`noise_edges` the band within which sampling noise alone spreads a window's
variances, :func:`shrink_ratios` the rule along each principal direction,
:func:`shrunk_factor` the rule for a whole covariance, and :func:`window_factor` the
factor a window of running moments gives (or ``None`` when it cannot be used).
"""

from __future__ import annotations

import math

import numpy as np

from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics.arithmetic import exp, log
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import cholesky, matmul, solve_lower, symmetric_eigen
from kameleon.core.tuning.adaptation import Welford, usable_covariance

__all__ = [
    "NUGGET",
    "UNMOVED",
    "WALK_AUTOCORRELATION",
    "noise_edges",
    "shrink_ratios",
    "shrunk_factor",
    "window_factor",
    "window_weight",
]

#: Nugget of a diagonal map's variances, relative to themselves.
NUGGET = 1e-6
#: Integrated autocorrelation time of an optimally scaled random walk, in units of ``d``.
WALK_AUTOCORRELATION = 1 / 0.3


def window_weight(states: int, dim: int) -> float:
    """The weight ``a`` of a window of ``states`` states against the previous estimate:
    ``S = a Sigma + (1 - a) P``.

    A window holds about ``n_eff = 0.3 n / d`` independent draws: an optimally scaled
    random walk's integrated autocorrelation time is about ``d / 0.3`` (Roberts, Gelman
    and Gilks 1997). The previous estimate weighs as ``d / 2`` of them, so ``a = n_eff /
    (n_eff + d / 2)``: the posterior mean of a covariance under an inverse-Wishart prior
    centred on the previous estimate with about ``d / 2`` degrees of freedom. A sample
    covariance from ``n_eff`` draws in ``d`` dimensions has eigenvalues spread over
    ``(1 +- sqrt(d / n_eff))^2`` of the truth (Marchenko and Pastur): near ``n_eff = d``
    its smallest goes to 0. Without the shrinkage the next window, whose proposals it
    shapes, explores a too narrow direction less and estimates it narrower still; the
    map collapsed (a 9-d Gaussian started 2 to 4 sds away: eigenvalues 1/100 of the
    target's after a 1 000 warm-up, kernel HMC then accepting 5 %, BENCHMARKS.md
    section 4). A window of many draws still overrides the previous estimate: a
    rotation with scales a hundredfold apart is learnt within the scouting run.
    """
    draws = states / (WALK_AUTOCORRELATION * dim)
    return draws / (draws + 0.5 * dim)


#: A direction along which a window's variance is below this share of its widest
#: direction's was not moved in (the window's covariance is singular there, up to
#: rounding): it carries no evidence of a narrower target.
UNMOVED = 1e-10


def noise_edges(states: int, dim: int) -> tuple[float, float]:
    """The Marchenko-Pastur edges ``(1 -+ sqrt(d / n_eff))^2`` between which the
    eigenvalues of a window's covariance fall, relative to a previous estimate that is
    right, from sampling noise alone; ``n_eff = 0.3 n / d`` as in :func:`window_weight`.
    ``(0, 1)`` while ``n_eff <= d``: then a window can be singular from noise alone."""
    draws = states / (WALK_AUTOCORRELATION * dim)
    if draws <= dim:
        return 0.0, 1.0
    root = math.sqrt(dim / draws)
    return (1.0 - root) ** 2, (1.0 + root) ** 2


def shrink_ratios(ratios: FloatArray, a: float, edges: tuple[float, float]) -> FloatArray:
    """The shrunk estimate's variances along the window's principal directions, relative
    to the previous estimate's, given the window's ``ratios`` there, its weight ``a``
    (:func:`window_weight`) and its noise edges (:func:`noise_edges`).

    The shrinkage is linear, ``f(r) = a r + (1 - a)`` (the posterior mean under an
    inverse-Wishart prior centred on the previous estimate), except along directions
    narrower than noise explains, where it is geometric and continuous,
    ``f(r) = f(e) (r / e)^a`` below the threshold ``e``. Linear all the way, a direction
    whose variance is ``1e-6`` of the previous estimate's (the first is the guess
    ``initial_scale^2 I``, in the user's units; later ones may hold a far start's drift)
    keeps a share ``prod (1 - a)`` of it through the windows: a map tens of times too
    wide there, and every kernel sampler wrong at a warm-up of 5 000 on targets whose
    scales span orders of magnitude (BENCHMARKS.md section 4). In logs a wrong previous
    estimate loses the share ``a`` of its error at every window, whatever the units.

    The threshold is the lower noise edge scaled by the window's own spread, ``e =
    e_lower min(1, r_max / e_upper)``: a window narrower than the previous estimate in
    every direction is a chain whose steps were small, not a narrower target (following
    it in logs collapsed the map of chains started far out), so only a direction narrow
    against the window's widest is followed in logs. A direction the window did not
    move in (:data:`UNMOVED`) is shrunk linearly.
    """
    widest = float(np.max(ratios))
    unmoved = ~(ratios > UNMOVED * widest)
    ratios = np.where(unmoved, 0.0, ratios)
    linear: FloatArray = a * ratios + (1 - a)
    lower, upper = edges
    threshold = lower * min(1.0, widest / upper)
    if not threshold > 0:
        return linear
    geometric = (a * threshold + (1 - a)) * exp(a * log(np.maximum(ratios, 1e-300) / threshold))
    shrunk: FloatArray = np.where(unmoved | (ratios >= threshold), linear, geometric)
    return shrunk


def shrunk_factor(
    window: FloatArray, prior: FloatArray, a: float, edges: tuple[float, float] | None
) -> FloatArray:
    """The lower Cholesky factor of the window's covariance ``window`` shrunk toward the
    previous estimate ``P = prior prior^T`` with the window's weight ``a``.

    In the previous estimate's whitened coordinates the window's covariance is ``M =
    prior^-1 window prior^-T``, with eigenvalues ``r_i`` (the ratios of the window's
    variance to the previous estimate's along its principal directions ``v_i``, the same
    bits on every CPU: :func:`core.numerics.matrices.symmetric_eigen`). Each ratio is
    shrunk by :func:`shrink_ratios` (linearly, ``a r + (1 - a)``, when ``edges`` is
    ``None``: then the estimate is ``a window + (1 - a) P``), and the estimate is ``prior
    V diag(f(r)) V^T prior^T``, whose factor is ``prior chol(V diag(f(r)) V^T)``. Where
    ``M - e_lower I`` is definite (every ratio above the lower noise edge, hence above
    the threshold: the usual case once the scales are right), every ratio is shrunk
    linearly and ``V diag(f(r)) V^T = a M + (1 - a) I`` needs no eigenvectors. The rule
    does not depend on the coordinates: a linear map of the target maps the window, the
    previous estimate and the result alike (a rule on each coordinate's variance left
    the map wrong on Gaussians whose axes are rotated, BENCHMARKS.md section 4).
    """
    dim = len(window)
    rows = np.array([solve_lower(prior, np.ascontiguousarray(window[:, j])) for j in range(dim)])
    m = np.array([solve_lower(prior, np.ascontiguousarray(rows[:, j])) for j in range(dim)])
    m = 0.5 * (m + np.transpose(m))
    if edges is None or not edges[0] > 0 or _definite(m - edges[0] * np.eye(dim)):
        shrunk = a * m + (1 - a) * np.eye(dim)
    else:
        ratios, vectors = symmetric_eigen(m)
        shrunk = matmul(vectors * shrink_ratios(ratios, a, edges), np.transpose(vectors))
    return matmul(prior, jittered_cholesky(0.5 * (shrunk + np.transpose(shrunk))))


def _definite(matrix: FloatArray) -> bool:
    """Whether the symmetric ``matrix`` is positive definite (its Cholesky factor exists)."""
    try:
        cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True


def window_factor(
    moments: Welford, dense: bool, prior: FloatArray, learning: bool = False
) -> FloatArray | None:
    """The factor of the window's covariance shrunk toward the previous estimate ``P =
    prior prior^T`` (:func:`shrunk_factor`; ``"diagonal"``: each coordinate's variance by
    :func:`shrink_ratios`, with a nugget of ``1e-6`` of itself), or ``None`` if the
    window is too short or never moved in some coordinate, or its covariance is not
    usable (:func:`core.tuning.adaptation.usable_covariance`: the chain drifts on a flat
    or unbounded target).

    Scouting's windows follow a narrower window in logs where noise cannot explain it
    (:func:`shrink_ratios`): they must forget a first guess in the wrong units and a far
    start's drift. The learning windows after scouting (``learning``), whose previous
    estimate is already the target's scale, shrink linearly: a window in one arm of a
    bent target is narrower across the arm than the target is, and following that in
    logs narrowed the map where the target is wide.
    """
    if moments.count < 2:
        return None
    sigma = moments.covariance()
    if not usable_covariance(sigma):
        return None
    sigma = 0.5 * (sigma + sigma.T)
    diagonal = np.diagonal(sigma).copy()
    if not np.all(np.isfinite(sigma)) or not np.all(diagonal > 0):
        return None
    dim = len(diagonal)
    a = window_weight(moments.count, dim)
    edges = None if learning else noise_edges(moments.count, dim)
    if not dense:
        previous = np.add.reduce(prior * prior, axis=1)  # the diagonal of prior prior^T
        ratios = diagonal / previous
        shrunk = a * ratios + (1 - a) if edges is None else shrink_ratios(ratios, a, edges)
        return np.diag(np.sqrt(previous * shrunk * (1 + NUGGET)))
    try:
        return shrunk_factor(sigma, prior, a, edges)
    except np.linalg.LinAlgError:  # rounding left it far from definite: keep the last basis
        return None
