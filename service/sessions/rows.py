"""The draw row layout: one fixed-size row of little-endian float64 per transition."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = ["RowLayout", "Rows"]

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
