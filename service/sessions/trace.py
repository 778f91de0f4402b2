"""The trace: every chain's draws thinned for plotting, with R-hat and ESS as the run went.

One stride for all chains, a power of two, so that successive answers for a growing
run keep the same draws until the stride doubles; the rows between the kept ones are
never read (:meth:`Store.read_draws_strided`).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.diagnostics import MIN_DRAWS, ess_bulk, rhat
from kameleon.service.sessions.draws import RowLayout, Rows
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store

__all__ = ["TraceQuery", "etag", "read_trace", "stride_for"]


@dataclass(frozen=True, slots=True)
class TraceQuery:
    points: int
    include_warmup: bool
    params: tuple[int, ...]  # indices of the picked parameters, in order
    checkpoints: int


def stride_for(length: int, points: int) -> int:
    """The smallest power of two that leaves at most ``points`` of ``length`` draws."""
    stride = 1
    while -(-length // stride) > points:
        stride *= 2
    return stride


def etag(meta: SessionMeta, lengths: Sequence[int], query: TraceQuery) -> str:
    """A strong validator of the answer: the session, every chain's draws, the query."""
    key = f"{meta.id}|{list(lengths)}|{query}"
    return '"' + hashlib.blake2b(key.encode(), digest_size=12).hexdigest() + '"'


async def chain_lengths(store: Store, meta: SessionMeta) -> list[int]:
    """Draws recorded per chain."""
    return [r.draws for r in await store.load_chains(meta.id, range(meta.chains))]


async def read_trace(
    store: Store, meta: SessionMeta, lengths: Sequence[int], query: TraceQuery
) -> dict[str, Any]:
    """The trace document (``schemas.Trace``) for chains of ``lengths`` draws."""
    offset = 0 if query.include_warmup else meta.warmup
    selected = [max(0, n - offset) for n in lengths]
    stride = stride_for(max(selected, default=0), query.points)
    picked = [RowLayout.POSITION + p for p in query.params]
    nbytes = RowLayout.nbytes(meta.dim)
    chains: list[dict[str, Any]] = []
    kept: list[Rows] = []
    for chain, length in enumerate(selected):
        raw = await store.read_draws_strided(
            meta.id, chain, offset, offset + length, stride, nbytes
        )
        rows = RowLayout.parse(raw, meta.dim)
        kept.append(rows)
        chains.append(
            {
                "chain": chain,
                "length": length,
                "iterations": list(range(offset + 1, offset + 1 + stride * len(rows), stride)),
                "draws": np.ascontiguousarray(rows[:, picked]),
                "log_density": np.ascontiguousarray(rows[:, RowLayout.LOG_DENSITY]),
            }
        )
    running = await asyncio.to_thread(
        _running, kept, picked, offset, stride, meta.warmup, query.checkpoints
    )
    return {
        "param_names": [meta.param_names[p] for p in query.params],
        "params": list(query.params),
        "warmup": meta.warmup,
        "stride": stride,
        "chains": chains,
        "running": running,
    }


def _running(
    kept: Sequence[Rows],
    columns: Sequence[int],
    offset: int,
    stride: int,
    warmup: int,
    checkpoints: int,
) -> dict[str, Any]:
    """R-hat and bulk ESS of the kept post-warm-up draws at up to ``checkpoints``
    lengths, evenly spaced; the chains cut to a common length."""
    # Kept draw j is iteration offset + 1 + j * stride; post-warm-up from the first
    # j whose iteration is above warmup.
    first = max(0, -(-(warmup - offset) // stride)) if warmup > offset else 0
    common = min((len(rows) - first for rows in kept), default=0)
    iterations: list[int] = []
    r_hat: list[list[float | None]] = []
    ess: list[list[float | None]] = []
    if common < MIN_DRAWS or not kept:
        return {"iterations": iterations, "r_hat": r_hat, "ess_bulk": ess}
    post = np.stack([rows[first : first + common][:, columns] for rows in kept])
    lengths = sorted(
        {max(MIN_DRAWS, round(common * k / checkpoints)) for k in range(1, checkpoints + 1)}
    )
    for n in lengths:
        iterations.append(offset + 1 + (first + n - 1) * stride)
        r_hat.append([_finite(rhat(post[:, :n, i])) for i in range(post.shape[2])])
        ess.append([_finite(ess_bulk(post[:, :n, i])) for i in range(post.shape[2])])
    return {"iterations": iterations, "r_hat": r_hat, "ess_bulk": ess}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
