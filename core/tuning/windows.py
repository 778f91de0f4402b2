"""Warm-up windows of doubling length, as Stan's warm-up lays them out.

Adaptive Metropolis (``windows: true``) and the kernel samplers' scouting run estimate a
covariance in windows ending at ``w / 32, w / 16, ..., w / 2, w``; each window starts
from the previous one's estimate, so a scale that the first proposals got wrong by
orders of magnitude is corrected geometrically rather than by diffusion. A window
shorter than its minimum is merged into the next.
"""

from __future__ import annotations

__all__ = ["min_window", "window_ends", "window_start"]


def min_window(dim: int) -> int:
    """States a window needs before its covariance is trusted."""
    return max(20, 2 * dim)


def window_ends(w: int, dim: int, minimum: int | None = None) -> tuple[int, ...]:
    """The last iterations of the scouting windows: ``w / 32, w / 16, ..., w / 2, w``,
    leaving out any that would make a window shorter than ``minimum`` states (default:
    what the scouting run needs, :func:`min_window`)."""
    shortest = min_window(dim) if minimum is None else minimum
    ends: list[int] = []
    for k in (5, 4, 3, 2, 1):
        end = w >> k
        if end - (ends[-1] if ends else 0) >= shortest and w - end >= shortest:
            ends.append(end)
    return (*ends, w)


def window_start(t: int, w: int, dim: int) -> int:
    """The iteration before the window that iteration ``t`` belongs to begins."""
    return max((end for end in window_ends(w, dim) if end < t), default=0)
