"""Draws: the one row layout, and reading rows back (slices, pages, told values).

A chain's draws are rows of little-endian float64, one appended per transition, in the
order of :data:`COLUMNS`; the position follows them. Every reader goes through
:class:`RowLayout`, never through column numbers of its own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import SessionNotFound, Store

__all__ = ["ChainSlice", "DrawsQuery", "RowLayout", "Rows", "read_rows", "read_slices", "told"]

Rows = np.ndarray[Any, np.dtype[np.float64]]


class RowLayout:
    """Columns of a draw row, then the position (``dim`` values) from :attr:`POSITION`."""

    #: The log density told for the proposal.
    TOLD = 0
    #: The chain's log density after the transition.
    LOG_DENSITY = 1
    #: 1.0 if the proposal was accepted, else 0.0.
    ACCEPTED = 2
    #: First column of the position.
    POSITION = 3

    @staticmethod
    def width(dim: int) -> int:
        """Values in a row."""
        return RowLayout.POSITION + dim

    @staticmethod
    def nbytes(dim: int) -> int:
        """Bytes in a row."""
        return 8 * RowLayout.width(dim)

    @staticmethod
    def pack(told_value: float, log_density: float, accepted: bool, position: Any) -> bytes:
        header = struct.pack("<3d", told_value, log_density, 1.0 if accepted else 0.0)
        return header + np.ascontiguousarray(position, dtype="<f8").tobytes()

    @staticmethod
    def parse(raw: bytes, dim: int) -> Rows:
        """Rows as an array of shape ``(rows, width(dim))``."""
        return np.frombuffer(raw, dtype="<f8").reshape(-1, RowLayout.width(dim))

    @staticmethod
    def positions(rows: Rows) -> Rows:
        return rows[:, RowLayout.POSITION :]


async def read_rows(store: Store, meta: SessionMeta, chain: int, start: int, stop: int) -> Rows:
    """Draw rows ``[start, stop)`` of one chain (clipped to those there are)."""
    raw = await store.read_draws(meta.id, chain, start, stop, RowLayout.nbytes(meta.dim))
    return RowLayout.parse(raw, meta.dim)


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
    rows: Rows  # (n, RowLayout.width(dim)), thinned


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
            rows = np.empty((0, RowLayout.width(meta.dim)))
        more = more or stop > query.start + span
        slices.append(ChainSlice(record.chain, query.start, offset + query.start + 1, rows))
    return slices, (query.start + span if more else None)
