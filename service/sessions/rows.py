"""The draw row layout: one fixed-size row of little-endian float64 per transition."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RowLayout", "Rows"]

Rows = np.ndarray[Any, np.dtype[np.float64]]


class RowLayout:
    """Columns of a draw row, then the position (``dim`` values) from :attr:`POSITION`,
    then the sampler's per-transition statistics (``stats`` values: its record's
    ``stats``, none for most samplers)."""

    #: The log density told for the proposal.
    TOLD = 0
    #: The chain's log density after the transition.
    LOG_DENSITY = 1
    #: 1.0 if the proposal was accepted, else 0.0.
    ACCEPTED = 2
    #: First column of the position.
    POSITION = 3

    @staticmethod
    def width(dim: int, stats: int = 0) -> int:
        """Values in a row."""
        return RowLayout.POSITION + dim + stats

    @staticmethod
    def nbytes(dim: int, stats: int = 0) -> int:
        """Bytes in a row."""
        return 8 * RowLayout.width(dim, stats)

    @staticmethod
    def pack(
        told_value: float,
        log_density: float,
        accepted: bool,
        position: Any,
        stats: Sequence[float] = (),
    ) -> bytes:
        header = struct.pack("<3d", told_value, log_density, 1.0 if accepted else 0.0)
        body = np.ascontiguousarray(position, dtype="<f8").tobytes()
        if not stats:
            return header + body
        return header + body + struct.pack(f"<{len(stats)}d", *stats)

    @staticmethod
    def parse(raw: bytes, dim: int, stats: int = 0) -> Rows:
        """Rows as an array of shape ``(rows, width(dim, stats))``."""
        return np.frombuffer(raw, dtype="<f8").reshape(-1, RowLayout.width(dim, stats))

    @staticmethod
    def positions(rows: Rows, dim: int) -> Rows:
        return rows[:, RowLayout.POSITION : RowLayout.POSITION + dim]

    @staticmethod
    def stats(rows: Rows, dim: int) -> Rows:
        """The per-transition statistics, shape ``(rows, stats)``."""
        return rows[:, RowLayout.POSITION + dim :]
