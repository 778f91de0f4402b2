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
from kameleon.service.sessions.rows import RowLayout
from kameleon.service.store.base import Quota

__all__ = [
    "COPIES",
    "GROW_BYTES",
    "chain_bytes",
    "describe",
    "grant_step",
    "iteration_bytes",
    "quota_of",
    "session_bytes",
]

#: Copies of a chain's arrays alive at once: decoded, encoded (4/3 of base64 plus JSON),
#: and a step's temporaries.
COPIES = 3


def _preconditioning(d: int, params: Any) -> int:
    """Scouting moments and factor, the preconditioner, and the whitening temporaries."""
    if getattr(params, "preconditioning", "none") == "none":
        return d * d + 2 * d
    return 4 * d * d + 4 * d


def chain_floats(algorithm: str, d: int, params: Any) -> int:
    """The floats one chain of ``algorithm`` keeps and works with, at most."""
    if algorithm == "rwm":
        return 8 * d
    if algorithm == "am":
        # Welford mean and covariance, the window's covariance, the proposal covariance
        # and its Cholesky factor.
        return 4 * d * d + 4 * d
    if algorithm == "kameleon":
        n = int(params.subsample_size)
        # Reservoir and subsample, kernel gradients at two points, the d x d proposal
        # covariance and factor (d <= n) or the n x n Woodbury matrices (d > n).
        inner = 2 * d * d if d <= n else 2 * n * n
        return _preconditioning(d, params) + 4 * n * d + inner
    if algorithm == "kmc-lite":
        n = int(params.num_centres)
        # Reservoir of centres, the n x n kernel matrix and its factor during a refit.
        return _preconditioning(d, params) + 3 * n * d + 2 * n * n + 4 * n
    if algorithm == "kmc-finite":
        m, u = int(params.num_features), int(params.update_every)
        # Frequencies, the m x m covariance and its factor, the batch of pending states.
        return _preconditioning(d, params) + 2 * m * d + 3 * m * m + (u + 4) * d
    raise ValueError(f"no memory model for {algorithm!r}")


def chain_bytes(algorithm: str, d: int, params: Any) -> int:
    return 8 * COPIES * chain_floats(algorithm, d, params)


def session_bytes(
    algorithm: str, dim: int, chains: int, params: Any, max_iterations: int | None
) -> int:
    """Every chain's state, and every draw row if the session has ``max_iterations``."""
    draws = RowLayout.nbytes(dim) * max_iterations if max_iterations is not None else 0
    return chains * (chain_bytes(algorithm, dim, params) + draws)


#: What an open-ended session (no ``max_iterations``) reserves for its draws at a time:
#: its first reservation pays for this much (or 100 iterations per chain, if more),
#: and each time its chains near the end of what is paid for, it reserves as much again.
GROW_BYTES = 4 * 2**20


def iteration_bytes(dim: int, chains: int) -> int:
    """The draw rows one iteration of every chain appends."""
    return chains * RowLayout.nbytes(dim)


def grant_step(dim: int, chains: int) -> int:
    """Iterations per chain that an open-ended session reserves at a time."""
    return max(100, GROW_BYTES // iteration_bytes(dim, chains))


def quota_of(settings: Settings) -> Quota:
    """The limits every reservation keeps (PROTOCOL.md, 429)."""
    return Quota(
        sessions=settings.max_sessions_per_key,
        bytes=settings.max_bytes_per_key,
        total_bytes=settings.max_bytes_total,
    )


def describe(n: int) -> str:
    """Bytes for a person: ``"2.3 GB"``."""
    size = float(n)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError  # pragma: no cover
