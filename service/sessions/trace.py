"""The trace: every chain's draws thinned for plotting, with R-hat and ESS as the run went.

One stride for all chains, a power of two, so that successive answers for a growing
run keep the same draws until the stride doubles; the rows between the kept ones are
never read (:meth:`Store.read_draws_strided`).

A sampler whose chain is an ensemble of walkers recorded in turn (``ensemble``,
``smc``'s particles: :attr:`core.interface.sampler.Sampler.ensemble_size`) has its running R-hat and
ESS computed as its diagnostics are (:mod:`core.diagnostics.assess`), on each walker's whole sweeps
from the first sweep of moves after warm-up, read walker by walker with a stride of a
power of two sweeps: each walker as a chain of its own (``ensemble``), or each chain's
population as a whole (``smc``, :mod:`core.diagnostics.population`). Read interleaved, as one
chain, the walkers' draws would hide the correlation of each walker's and overstate
the ESS.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.service.core_api import MIN_DRAWS, FloatArray, ess_bulk, population_summaries, rhat
from kameleon.service.sessions.chains import LRU
from kameleon.service.sessions.draws import RowLayout, Rows
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store

__all__ = ["RunningCache", "TraceQuery", "etag", "read_trace", "stride_for"]


@dataclass(frozen=True, slots=True)
class TraceQuery:
    points: int
    include_warmup: bool
    params: tuple[int, ...]  # indices of the picked parameters, in order
    checkpoints: int


class RunningCache:
    """R-hat and bulk ESS already computed at a checkpoint, by (session, first kept
    iteration, stride, parameter, length): draws are never rewritten, so they hold.
    Shared by the threads that compute them."""

    def __init__(self, size: int = 50_000) -> None:
        self._lru = LRU(size)
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> tuple[float | None, float | None] | None:
        with self._lock:
            value: tuple[float | None, float | None] | None = self._lru.get(key)
            if value is not None:
                self._lru.move_to_end(key)
            return value

    def put(self, key: tuple[Any, ...], value: tuple[float | None, float | None]) -> None:
        with self._lock:
            self._lru.put(key, value)


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
    store: Store,
    meta: SessionMeta,
    lengths: Sequence[int],
    query: TraceQuery,
    cache: RunningCache | None = None,
) -> dict[str, Any]:
    """The trace document (``schemas.Trace``) for chains of ``lengths`` draws."""
    offset = 0 if query.include_warmup else meta.warmup
    selected = [max(0, n - offset) for n in lengths]
    stride = stride_for(max(selected, default=0), query.points)
    picked = [RowLayout.POSITION + p for p in query.params]
    nbytes = RowLayout.nbytes(meta.dim, len(meta.stats))
    chains: list[dict[str, Any]] = []
    kept: list[Rows] = []
    for chain, length in enumerate(selected):
        raw = await store.read_draws_strided(
            meta.id, chain, offset, offset + length, stride, nbytes
        )
        rows = RowLayout.parse(raw, meta.dim, len(meta.stats))
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
    walkers = meta.sampler.ensemble_size
    if walkers is not None:
        w = walkers(meta.params)
        kept, grid = await _walker_rows(store, meta, lengths, w, query.points, nbytes)
        grid = dataclasses.replace(grid, checkpoints=query.checkpoints)
    else:
        w, grid = 1, _Grid(meta.id, offset, stride, meta.warmup, query.checkpoints)
    running = await asyncio.to_thread(
        _running,
        kept,
        query.params,
        grid,
        cache if cache is not None else RunningCache(1),
        _statistic(meta, w),
    )
    # A walker's checkpoint names the last iteration of its sweep.
    running["iterations"] = [i + w - 1 for i in running["iterations"]]
    return {
        "param_names": [meta.param_names[p] for p in query.params],
        "params": list(query.params),
        "warmup": meta.warmup,
        "stride": stride,
        "chains": chains,
        "running": running,
    }


async def _walker_rows(
    store: Store, meta: SessionMeta, lengths: Sequence[int], w: int, points: int, nbytes: int
) -> tuple[list[Rows], _Grid]:
    """Every walker's post-warm-up whole sweeps, thinned by a power of two sweeps, as a
    chain of its own, and their grid: walker ``k``'s kept row ``j`` is iteration
    ``start + j * stride + k`` (``start`` the first iteration of moves after warm-up that
    begins a sweep, ``stride`` the sweeps' stride times ``w``)."""
    start = max(meta.warmup + 1, w)
    start += -start % w
    sweeps = min((max(0, n - (start - 1)) // w for n in lengths), default=0)
    step = stride_for(sweeps, points)
    rows: list[Rows] = []
    for chain in range(len(lengths)):
        stop = start - 1 + sweeps * w
        for k in range(w):
            raw = await store.read_draws_strided(
                meta.id, chain, start - 1 + k, stop, step * w, nbytes
            )
            rows.append(RowLayout.parse(raw, meta.dim, len(meta.stats)))
    grid = _Grid(f"{meta.id}/walkers", start - 1, step * w, start - 1, 0)
    return rows, grid


@dataclass(frozen=True, slots=True)
class _Grid:
    session: str
    offset: int  # kept draw j is iteration offset + 1 + j * stride
    stride: int
    warmup: int
    checkpoints: int


Statistic = Callable[[FloatArray], tuple[float, float]]


def _statistic(meta: SessionMeta, w: int) -> Statistic:
    """R-hat and bulk ESS of one parameter's kept draws, ``(chains, draws)``, as the
    session's diagnostics compute them: of chains, or of ``w`` walkers per chain (rows
    chain by chain), or of a population per chain, read as a whole
    (:mod:`core.diagnostics.population`)."""
    population = meta.sampler.population
    if w > 1 and population is not None:
        kappa = population(meta.params)

        def of_population(chains: FloatArray) -> tuple[float, float]:
            c = chains.shape[0] // w
            walkers = chains.reshape(c, w, -1).transpose(0, 2, 1)[..., None]
            (summary,) = population_summaries(walkers, ["x"], kappa)
            return summary["r_hat"], summary["ess_bulk"]

        return of_population
    return lambda chains: (rhat(chains), ess_bulk(chains))


def _running(
    kept: Sequence[Rows],
    params: Sequence[int],
    grid: _Grid,
    cache: RunningCache,
    statistic: Statistic,
) -> dict[str, Any]:
    """R-hat and bulk ESS of the kept post-warm-up draws (the chains cut to a common
    length) at every multiple of a power-of-two number of them, at most ``checkpoints``
    multiples, and at the common length last; so the checkpoints stay where they are as
    the run grows, and each is computed once (``cache``)."""
    # The first kept draw after warm-up: j * stride >= warmup - offset.
    first = -(-(grid.warmup - grid.offset) // grid.stride) if grid.warmup > grid.offset else 0
    common = min((len(rows) - first for rows in kept), default=0)
    iterations: list[int] = []
    r_hat: list[list[float | None]] = []
    ess: list[list[float | None]] = []
    if common < MIN_DRAWS:
        return {"iterations": iterations, "r_hat": r_hat, "ess_bulk": ess}
    step = stride_for(common, max(1, grid.checkpoints - 1))
    lengths = [n for n in range(step, common, step) if n >= MIN_DRAWS] + [common]
    start = grid.offset + 1 + first * grid.stride  # the first kept post-warm-up iteration
    for n in lengths[-grid.checkpoints :]:
        iterations.append(start + (n - 1) * grid.stride)
        rows_r: list[float | None] = []
        rows_e: list[float | None] = []
        for param in params:
            key = (grid.session, start, grid.stride, param, n)
            known = cache.get(key)
            if known is None:
                chains = np.stack(
                    [rows[first : first + n, RowLayout.POSITION + param] for rows in kept]
                )
                value_r, value_e = statistic(chains)
                known = (_finite(value_r), _finite(value_e))
                cache.put(key, known)
            rows_r.append(known[0])
            rows_e.append(known[1])
        r_hat.append(rows_r)
        ess.append(rows_e)
    return {"iterations": iterations, "r_hat": r_hat, "ess_bulk": ess}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
