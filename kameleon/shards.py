"""Consensus Monte Carlo in process: :func:`consensus` combines runs that each sampled
one shard of a data set (``kameleon.consensus``; through a service,
:meth:`kameleon.Client.consensus` does the same with sessions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from kameleon.core.populations.consensus import combine, shard_warnings
from kameleon.models import Consensus
from kameleon.result import Result

__all__ = ["consensus"]


def consensus(
    shards: Sequence[Result | npt.ArrayLike],
    *,
    method: Literal["weighted", "gaussian"] = "weighted",
    draws: int | None = None,
    seed: int = 0,
) -> Consensus:
    """Consensus Monte Carlo (Scott et al. 2016) over ``J`` shards of a data set.

    Each shard is a run that sampled the subposterior ``p(theta)^(1/J) p(x_j | theta)``
    (its log density raises the prior to ``1/J``): a :class:`~kameleon.Result` of
    :func:`kameleon.sample` (its post-warm-up draws, every chain) or an array of draws,
    ``(draws, dim)`` or ``(chains, draws, dim)``. ``method``: ``"weighted"``, each
    consensus draw the shards' draws averaged with the inverses of their sample
    covariances as weights; ``"gaussian"``, ``draws`` draws (default: as many as the
    shard with the fewest) from the product of the shards' Gaussian approximations,
    from ``seed``. Both are exact for Gaussian subposteriors; the answer's ``warnings``
    name the shards that warn themselves or are not Gaussian.

    Raises :class:`kameleon.core.populations.consensus.ConsensusError` (a ``ValueError``) for shards
    that cannot be combined.
    """
    arrays, own = [], []
    names: list[str] | None = None
    for shard in shards:
        if isinstance(shard, Result):
            a = np.asarray(shard.draws, dtype=float)
            own.append([w.code for w in shard.warnings])
            names = names or list(shard.param_names)
        else:
            a = np.asarray(shard, dtype=float)
            own.append([])
        arrays.append(a.reshape(-1, a.shape[-1]) if a.ndim == 3 else a)
    combined = combine(arrays, method, n=draws, seed=seed)
    dim = combined.mean.size
    names = names or [f"x{i}" for i in range(dim)]
    rows = combined.draws
    if draws is not None and len(rows) > draws:
        rows = rows[np.linspace(0, len(rows) - 1, draws).round().astype(np.intp)]
    return Consensus(
        method=method,
        draws=rows,
        mean=combined.mean,
        sd=np.sqrt(np.diag(combined.covariance)),
        covariance=combined.covariance,
        param_names=names,
        shard_draws=[len(a) for a in arrays],
        warnings=[(w.code, w.message) for w in shard_warnings(arrays, names, own)],
    )
