"""What a session will cost in memory, known before anything is allocated.

A chain's state holds O(d^2) matrices for the samplers that learn a covariance (Adaptive
Metropolis, and the kernel samplers' preconditioning) and O(n d) or O(n^2) arrays for the
kernel samplers' subsamples, fits and features. :func:`chain_bytes` bounds what one chain
keeps and works with, from the algorithm, the dimension and the options;
:func:`session_bytes` adds every chain and, with ``max_iterations``, every draw row. The
service refuses a session over its budget before it builds one (PROTOCOL.md: 422, with
the figure), so that no request can make the process allocate gigabytes.

The count of floats per chain is each sampler's largest arrays (read off ``core``), and
the bytes are 8 per float times :data:`COPIES`: the decoded state, its encoded form in
the store (base64 in JSON), and the temporaries of a step.
"""

from __future__ import annotations

from typing import Any

from kameleon.service.config import Settings
from kameleon.service.core_api import COPIES, SAMPLERS, chain_bytes, chain_floats
from kameleon.service.core_api import describe_memory as describe
from kameleon.service.sessions.rows import RowLayout
from kameleon.service.store.records import Quota

__all__ = [
    "COPIES",
    "GROW_BYTES",
    "chain_bytes",
    "chain_floats",
    "describe",
    "grant_step",
    "iteration_bytes",
    "quota_of",
    "session_bytes",
]


def session_bytes(
    algorithm: str, dim: int, chains: int, params: Any, max_iterations: int | None
) -> int:
    """Every chain's state, and every draw row if the session has ``max_iterations``."""
    row = RowLayout.nbytes(dim, row_stats(algorithm))
    draws = row * max_iterations if max_iterations is not None else 0
    return chains * (chain_bytes(algorithm, dim, params) + draws)


#: What an open-ended session (no ``max_iterations``) reserves for its draws at a time:
#: its first reservation pays for this much (or 100 iterations per chain, if more),
#: and each time its chains near the end of what is paid for, it reserves as much again.
GROW_BYTES = 4 * 2**20


def row_stats(algorithm: str) -> int:
    """The per-transition statistics in each of ``algorithm``'s draw rows."""
    sampler = SAMPLERS.get(algorithm)
    return len(sampler.stats) if sampler is not None else 0


def iteration_bytes(dim: int, chains: int, stats: int = 0) -> int:
    """The draw rows one iteration of every chain appends (``stats``: the sampler's
    per-transition statistics in each)."""
    return chains * RowLayout.nbytes(dim, stats)


def grant_step(dim: int, chains: int, stats: int = 0) -> int:
    """Iterations per chain that an open-ended session reserves at a time."""
    return max(100, GROW_BYTES // iteration_bytes(dim, chains, stats))


def quota_of(settings: Settings) -> Quota:
    """The limits every reservation keeps (PROTOCOL.md, 429)."""
    return Quota(
        sessions=settings.max_sessions_per_key,
        bytes=settings.max_bytes_per_key,
        total_bytes=settings.max_bytes_total,
    )
