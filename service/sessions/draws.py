"""Draws: the one row layout, and reading rows back (slices, pages, told values).

A chain's draws are rows of little-endian float64, one appended per transition, in the
order of :data:`COLUMNS`; the position follows them. Every reader goes through
:class:`RowLayout`, never through column numbers of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.rows import RowLayout, Rows
from kameleon.service.store.base import Store
from kameleon.service.store.records import SessionNotFound

__all__ = ["ChainSlice", "DrawsQuery", "RowLayout", "Rows", "read_rows", "read_slices", "told"]


async def read_rows(store: Store, meta: SessionMeta, chain: int, start: int, stop: int) -> Rows:
    """Draw rows ``[start, stop)`` of one chain (clipped to those there are)."""
    stats = len(meta.stats)
    raw = await store.read_draws(meta.id, chain, start, stop, RowLayout.nbytes(meta.dim, stats))
    return RowLayout.parse(raw, meta.dim, stats)


async def told(store: Store, meta: SessionMeta, chain: int, iteration: int) -> float:
    """The log density told for transition ``iteration`` (from 1) of ``chain``."""
    rows = await read_rows(store, meta, chain, iteration - 1, iteration)
    if len(rows) == 0:  # the chain was rewritten under us: the session is gone
        raise SessionNotFound(meta.id)
    return float(rows[0, RowLayout.TOLD])


@dataclass(frozen=True, slots=True)
class DrawsQuery:
    """A slice of the draws: chains, ``[start, stop)`` within the selection, thinning."""

    chain: int | None
    start: int
    stop: int | None
    thin: int
    include_warmup: bool


@dataclass(frozen=True, slots=True)
class ChainSlice:
    chain: int
    start: int  # index of the first row within the selection
    first_iteration: int
    rows: Rows  # (n, RowLayout.width(dim, stats)), thinned


async def read_slices(
    store: Store, meta: SessionMeta, query: DrawsQuery, page_rows: int
) -> tuple[list[ChainSlice], int | None]:
    """One page of draws and the selection index where the next page starts (or None).

    A page holds at most ``page_rows`` rows per chain after thinning; chains are read
    slice by slice, never whole.
    """
    chains = [query.chain] if query.chain is not None else list(range(meta.chains))
    records = await store.load_chains(meta.id, chains)
    offset = 0 if query.include_warmup else meta.warmup
    span = page_rows * query.thin
    slices, more = [], False
    for record in records:
        length = max(0, record.draws - offset)
        stop = length if query.stop is None else min(query.stop, length)
        end = min(stop, query.start + span)
        if end > query.start:
            rows = await read_rows(store, meta, record.chain, offset + query.start, offset + end)
            rows = rows[:: query.thin]
        else:
            rows = np.empty((0, RowLayout.width(meta.dim, len(meta.stats))))
        more = more or stop > query.start + span
        slices.append(ChainSlice(record.chain, query.start, offset + query.start + 1, rows))
    return slices, (query.start + span if more else None)
