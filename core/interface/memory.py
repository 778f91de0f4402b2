"""What a chain costs in memory, known before anything is allocated.

A chain's state holds O(d^2) matrices for the samplers that learn a covariance (Adaptive
Metropolis, and the kernel samplers' preconditioning) and O(n d) or O(n^2) arrays for the
kernel samplers' subsamples, fits and features. :func:`chain_bytes` bounds what one chain
keeps and works with, from the algorithm, the dimension and the options. The service
(``service/sessions/budget.py``) adds its draw rows and refuses a session over its
budget; :func:`kameleon.sample` in process adds its recorded rows
(:func:`inprocess_bytes`) and refuses the same way, before allocating.

The count of floats per chain is each sampler's largest arrays (its record's
``chain_floats``), and the bytes are 8 per float times :data:`COPIES`: the decoded state, its encoded form in the store (base64 in
JSON), and the temporaries of a step.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "COPIES",
    "chain_bytes",
    "chain_floats",
    "describe",
    "inprocess_bytes",
    "preconditioning_floats",
]

#: Copies of a chain's arrays alive at once: decoded, encoded (4/3 of base64 plus JSON),
#: and a step's temporaries.
COPIES = 3


def preconditioning_floats(d: int, params: Any) -> int:
    """The floats of a kernel sampler's preconditioning (:mod:`core.tuning.preconditioning`):
    scouting moments and factor, the preconditioner, and the whitening temporaries."""
    if getattr(params, "preconditioning", "none") == "none":
        return d * d + 2 * d
    return 4 * d * d + 4 * d


def chain_floats(algorithm: str, d: int, params: Any) -> int:
    """The floats one chain of ``algorithm`` keeps and works with, at most (each
    sampler's ``chain_floats``)."""
    from kameleon.core import SAMPLERS

    try:
        sampler = SAMPLERS[algorithm]
    except KeyError:
        raise ValueError(f"no memory model for {algorithm!r}") from None
    return int(sampler.chain_floats(d, params))


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
