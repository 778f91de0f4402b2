"""Consensus Monte Carlo (Scott et al. 2016): draws of a posterior from draws of its
subposteriors, one per shard of the data.

The data are split into ``J`` shards and each shard's subposterior
``p(theta) ^ (1 / J) p(x_s | theta)`` is sampled apart (by a session of its own, on any
process or machine). Their product is the full posterior. Two rules combine them, both
exact when every subposterior is Gaussian and approximations otherwise:

- :func:`weighted_average`: the ``t``-th consensus draw is
  ``(sum_s W_s)^-1 sum_s W_s theta_s_t``, the shards' ``t``-th draws averaged with the
  weights ``W_s``, the inverses of the shards' sample covariances.
- :func:`gaussian_product`: the product of the shards' Gaussian approximations
  ``N(m_s, S_s)``: covariance ``C = (sum_s S_s^-1)^-1`` and mean
  ``C sum_s S_s^-1 m_s``, and draws from it.

Where a subposterior is skewed or heavy-tailed the rules are biased, by an amount no
diagnostic of the shards can bound: :func:`shape_departures` names the coordinates of
each shard whose skewness or excess kurtosis is far from a Gaussian's, so that a caller
can say so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kameleon.core.diagnostics.summary import ess_bulk
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "MAX_EXCESS_KURTOSIS",
    "MAX_SHIFT",
    "MAX_SKEWNESS",
    "Combined",
    "ConsensusError",
    "ShardWarning",
    "combine",
    "gaussian_product",
    "shape_departures",
    "shard_warnings",
    "weighted_average",
]

#: A shard's marginal whose ``|skewness|`` is above this is reported as not Gaussian.
MAX_SKEWNESS = 0.5
#: The consensus's expected shift, in full-posterior sds, above which a shard's skewness
#: is reported (:func:`shape_departures`).
MAX_SHIFT = 0.2
#: A shard's marginal whose ``|excess kurtosis|`` is above this is reported as not Gaussian.
MAX_EXCESS_KURTOSIS = 1.0

METHODS = ("weighted", "gaussian")


class ConsensusError(ValueError):
    """Shards that cannot be combined (too few, of different dimensions, too few draws,
    a singular covariance); the message says which."""


@dataclass(frozen=True, slots=True)
class Combined:
    """Consensus draws, ``(n, d)``, and the combined mean and covariance."""

    draws: FloatArray
    mean: FloatArray
    covariance: FloatArray


def _checked(shards: Sequence[FloatArray]) -> list[FloatArray]:
    if len(shards) < 2:
        raise ConsensusError("consensus needs at least 2 shards")
    arrays = [np.asarray(s, dtype=np.float64) for s in shards]
    for j, a in enumerate(arrays):
        if a.ndim != 2:
            raise ConsensusError(f"shard {j}: draws are a (draws, dim) array")
        if not np.all(np.isfinite(a)):
            raise ConsensusError(f"shard {j}: draws must be finite")
    dim = arrays[0].shape[1]
    for j, a in enumerate(arrays):
        if a.shape[1] != dim:
            raise ConsensusError(f"shard {j} has dimension {a.shape[1]}, shard 0 has {dim}")
        if a.shape[0] < dim + 2:
            raise ConsensusError(
                f"shard {j} has {a.shape[0]} draws: at least dim + 2 = {dim + 2} are needed "
                "for its covariance"
            )
    return arrays


def _precision(j: int, draws: FloatArray) -> tuple[FloatArray, FloatArray]:
    """A shard's mean and the inverse of its sample covariance."""
    mean = draws.mean(axis=0)
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ConsensusError(
            f"shard {j}: the draws' covariance is singular (a coordinate that never moved?)"
        ) from None
    inv_chol = np.linalg.inv(chol)
    return mean, inv_chol.T @ inv_chol


def _total(precisions: Sequence[FloatArray]) -> FloatArray:
    total = np.sum(precisions, axis=0)
    try:
        np.linalg.cholesky(total)
    except np.linalg.LinAlgError:
        raise ConsensusError("the shards' precisions add up to a singular matrix") from None
    return np.asarray(total)


def weighted_average(shards: Sequence[FloatArray]) -> Combined:
    """Scott et al.'s consensus draws: ``n`` = the fewest draws of any shard, the ``t``-th
    draw the precision-weighted average of the shards' ``t``-th draws (a shard with
    more than ``n`` gives ``n`` spread evenly over all of its own; the shards are
    sampled apart, so which draws are paired does not matter). The mean and covariance
    are the consensus draws'."""
    arrays = _checked(shards)
    n = min(a.shape[0] for a in arrays)
    precisions = [_precision(j, a)[1] for j, a in enumerate(arrays)]
    total = _total(precisions)
    spread = [a[np.linspace(0, a.shape[0] - 1, n).round().astype(np.intp)] for a in arrays]
    weighted = sum(a @ w for a, w in zip(spread, precisions, strict=True))
    draws = np.linalg.solve(total, np.asarray(weighted).T).T
    return Combined(draws, draws.mean(axis=0), np.atleast_2d(np.cov(draws, rowvar=False)))


def gaussian_product(shards: Sequence[FloatArray], n: int, rng: np.random.Generator) -> Combined:
    """The product of the shards' Gaussian approximations, and ``n`` draws from it."""
    arrays = _checked(shards)
    fits = [_precision(j, a) for j, a in enumerate(arrays)]
    total = _total([w for _, w in fits])
    covariance = np.linalg.inv(total)
    covariance = (covariance + covariance.T) / 2
    mean = covariance @ np.sum([w @ m for m, w in fits], axis=0)
    chol = np.linalg.cholesky(covariance)
    draws = mean + rng.standard_normal((n, mean.size)) @ chol.T
    return Combined(draws, mean, covariance)


def combine(
    shards: Sequence[FloatArray], method: str, *, n: int | None = None, seed: int = 0
) -> Combined:
    """:func:`weighted_average` (``method`` ``"weighted"``) or :func:`gaussian_product`
    (``"gaussian"``, ``n`` draws, default the fewest draws of any shard, from ``seed``)."""
    if method == "weighted":
        return weighted_average(shards)
    if method == "gaussian":
        count = n if n is not None else min(np.shape(s)[0] for s in shards)
        return gaussian_product(shards, count, np.random.default_rng(seed))
    raise ConsensusError(f"method must be one of {', '.join(map(repr, METHODS))}")


def shape_departures(draws: FloatArray, shards: int = 1) -> list[tuple[int, float, float]]:
    """The coordinates of one shard's draws whose marginal is too far from Gaussian for a
    consensus of ``shards`` shards: ``(coordinate, skewness, excess kurtosis)``.

    A skewed subposterior's mean lies about ``skewness / 2`` of its sd from its mode, and
    its sd is about ``sqrt(J)`` times the full posterior's, so skewness of one sign in
    every shard moves the consensus by about ``skewness sqrt(J) / 2`` of the full
    posterior's sd. A coordinate is named when that is over :data:`MAX_SHIFT` with the
    skewness taken two of its standard errors (``sqrt(6 / ESS)``, the draws' bulk ESS:
    Markov chain draws are correlated) toward 0, or when
    ``|excess kurtosis|`` is over :data:`MAX_EXCESS_KURTOSIS`. (Logistic regression in 16
    shards of 62 points, skewness 0.2 to 0.5 per shard, was 0.1 to 0.8 sd off;
    in 4 shards of 250, 0.05 to 0.18: BENCHMARKS.md.)"""
    a = np.asarray(draws, dtype=np.float64)
    centred = a - a.mean(axis=0)
    sd = centred.std(axis=0)
    out = []
    for k in range(a.shape[1]):
        if sd[k] == 0:
            continue
        ess = ess_bulk(a[None, :, k]) if a.shape[0] >= 4 else math.nan
        noise = 2.0 * math.sqrt(6.0 / ess) if ess > 0 else math.inf
        z = centred[:, k] / sd[k]
        skew, kurt = float(np.mean(z**3)), float(np.mean(z**4) - 3.0)
        shift = max(abs(skew) - noise, 0.0) * math.sqrt(shards) / 2
        if shift > MAX_SHIFT or abs(skew) > MAX_SKEWNESS or abs(kurt) > MAX_EXCESS_KURTOSIS:
            out.append((k, skew, kurt))
    return out


@dataclass(frozen=True, slots=True)
class ShardWarning:
    """Why a consensus may be wrong, from one shard: ``code`` ``"shard_warnings"`` (the
    shard's own diagnostics warn) or ``"non_gaussian"`` (one of its marginals, named by
    ``parameter``, is skewed or heavy-tailed)."""

    code: str
    shard: int
    message: str
    parameter: str | None = None


def shard_warnings(
    shards: Sequence[FloatArray],
    param_names: Sequence[str],
    own: Sequence[Sequence[str]],
) -> list[ShardWarning]:
    """The warnings of a consensus over ``shards`` (each ``(draws, dim)``), ``own[j]``
    the codes of shard ``j``'s own convergence warnings."""
    out = []
    for j, (draws, codes) in enumerate(zip(shards, own, strict=True)):
        if codes:
            out.append(
                ShardWarning(
                    "shard_warnings",
                    j,
                    f"shard {j} warns ({', '.join(sorted(set(codes)))}): its draws may not "
                    "be its subposterior's, and the consensus inherits that",
                )
            )
        if np.shape(draws)[0] < 3:
            continue
        for k, skew, kurt in shape_departures(draws, len(shards)):
            name = param_names[k]
            out.append(
                ShardWarning(
                    "non_gaussian",
                    j,
                    f"shard {j}: {name}'s subposterior is not Gaussian (skewness {skew:.2f}, "
                    f"excess kurtosis {kurt:.2f}); consensus is exact only for Gaussian "
                    "subposteriors, and is biased here by an amount no diagnostic bounds",
                    name,
                )
            )
    return out
