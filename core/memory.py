"""What a chain costs in memory, known before anything is allocated.

A chain's state holds O(d^2) matrices for the samplers that learn a covariance (Adaptive
Metropolis, and the kernel samplers' preconditioning) and O(n d) or O(n^2) arrays for the
kernel samplers' subsamples, fits and features. :func:`chain_bytes` bounds what one chain
keeps and works with, from the algorithm, the dimension and the options. The service
(``service/sessions/budget.py``) adds its draw rows and refuses a session over its
budget; :func:`kameleon.sample` in process adds its recorded rows
(:func:`inprocess_bytes`) and refuses the same way, before allocating.

The count of floats per chain is each sampler's largest arrays, and the bytes are 8 per
float times :data:`COPIES`: the decoded state, its encoded form in the store (base64 in
JSON), and the temporaries of a step.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COPIES", "chain_bytes", "chain_floats", "describe", "inprocess_bytes"]

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


def inprocess_bytes(algorithm: str, dim: int, chains: int, params: Any, iterations: int) -> int:
    """What an in-process run of ``iterations`` transitions per chain (warm-up
    included) needs: every chain's state and its recorded rows (position, log density,
    told value, acceptance probability, accepted flag)."""
    rows = (8 * (dim + 3) + 1) * iterations
    return chains * (chain_bytes(algorithm, dim, params) + rows)


def describe(n: int) -> str:
    """Bytes for a person: ``"2.3 GB"``."""
    size = float(n)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError  # pragma: no cover
