"""Consensus Monte Carlo over sessions: ``POST /v1/consensus``.

Each session sampled the subposterior of one shard of a data set (its prior raised to
1/J: ``prior_power``, or by the client); their post-warm-up draws, all chains, are
combined by :mod:`core.populations.consensus`. Sessions may have run on any process that shares the
store. Nothing is stored: the answer is computed from the draws as they are.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kameleon.service.core_api import ConsensusError, combine, shard_warnings
from kameleon.service.sessions.diagnostics import Diagnostics
from kameleon.service.sessions.draws import RowLayout, read_rows
from kameleon.service.sessions.errors import Invalid
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store

__all__ = ["MAX_SHARD_ROWS", "consensus"]

#: Most post-warm-up draws read from one shard: a longer one is thinned evenly to this.
MAX_SHARD_ROWS = 200_000


async def _shard_draws(store: Store, meta: SessionMeta) -> np.ndarray:
    """A session's post-warm-up draws, chain after chain, thinned to at most
    :data:`MAX_SHARD_ROWS` rows."""
    records = await store.load_chains(meta.id, range(meta.chains))
    lengths = [max(0, r.draws - meta.warmup) for r in records]
    thin = max(1, math.ceil(sum(lengths) / MAX_SHARD_ROWS))
    parts = []
    for record in records:
        rows = await read_rows(store, meta, record.chain, meta.warmup, record.draws)
        parts.append(RowLayout.positions(rows[::thin], meta.dim))
    return np.concatenate(parts) if parts else np.zeros((0, meta.dim))


async def consensus(
    store: Store,
    diagnostics: Diagnostics,
    metas: Sequence[SessionMeta],
    method: str,
    draws: int | None,
    seed: int,
    max_draws: int,
) -> dict[str, Any]:
    """The answer of ``POST /v1/consensus`` (``schemas.ConsensusResponse``) for the shard
    sessions ``metas`` (each the caller's; :class:`Invalid` for shards that cannot be
    combined): ``draws`` consensus draws, or (``None``) as many as the shard with the
    fewest has, at most ``max_draws``."""
    first = metas[0]
    for k, meta in enumerate(metas[1:], start=1):
        if meta.dim != first.dim:
            raise Invalid(
                f"sessions[{k}] has dim {meta.dim}, sessions[0] has {first.dim}",
                field=f"sessions.{k}",
            )
        if meta.param_names != first.param_names:
            raise Invalid(
                f"sessions[{k}] names its parameters otherwise than sessions[0]",
                field=f"sessions.{k}",
            )
    shards = [await _shard_draws(store, meta) for meta in metas]
    own = [
        sorted({w["code"] for w in (await diagnostics.of(meta)).get("warnings") or []})
        for meta in metas
    ]
    shard_docs = [
        {"id": meta.id, "draws": len(rows), "prior_power": meta.prior_power, "warnings": codes}
        for meta, rows, codes in zip(metas, shards, own, strict=True)
    ]
    # Shard j is sessions[j]; each warning names its session too.
    warnings = [
        {
            "code": w.code,
            "message": w.message,
            "session": metas[w.shard].id,
            "parameter": w.parameter,
        }
        for w in shard_warnings(shards, first.param_names, own)
    ]
    fewest = min(len(rows) for rows in shards)
    wanted = draws if draws is not None else min(fewest, max_draws)
    try:
        combined = await asyncio.to_thread(combine, shards, method, n=wanted, seed=seed)
    except ConsensusError as exc:
        raise Invalid(str(exc), field="sessions") from None
    rows = combined.draws
    if len(rows) > wanted:  # weighted: as many as the fewest shard has; spread them
        rows = rows[np.linspace(0, len(rows) - 1, wanted).round().astype(np.intp)]
    return {
        "method": method,
        "param_names": list(first.param_names),
        "shards": shard_docs,
        "mean": combined.mean,
        "sd": np.sqrt(np.diag(combined.covariance)),
        "covariance": combined.covariance,
        "draws": np.ascontiguousarray(rows),
        "warnings": warnings,
    }
