"""The integrated autocorrelation time of an ensemble's walkers, as emcee estimates it.

emcee's ``integrated_time`` (Foreman-Mackey et al. 2013; the estimator of its
documentation's "Autocorrelation analysis" tutorial): for each walker, the normalised
autocorrelation function of its draws (about its own mean, by FFT), averaged over the
walkers; ``tau(M) = 1 + 2 sum_{k=1}^{M} rho(k)``; and Sokal's automatic window, the
smallest ``M`` with ``M >= c tau(M)``, ``c = 5``. Where no lag reaches the window
(a run too short), the last lag's ``tau`` is kept, where emcee's code keeps lag 0's
(``tau = 1``): a short run then reads as short.
The time is in steps of one walker, that is in sweeps of the ensemble: a sweep is ``W``
evaluations giving ``W`` draws, so it is also the evaluations per effective draw.

emcee refuses a chain shorter than 50 autocorrelation times (``tol = 50``): the
estimate is not yet trusted. :data:`MIN_TIMES` is that rule.

An ensemble chain's draws interleave its walkers (walker ``t mod W`` at iteration
``t``, :mod:`core.samplers.ensemble`); :func:`by_walker` gives each walker's draws.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray

__all__ = [
    "MIN_TIMES",
    "WINDOW_C",
    "autocorrelation",
    "by_walker",
    "integrated_time",
]

#: Sokal's window constant, emcee's default ``c``.
WINDOW_C = 5.0
#: A run shorter than this many autocorrelation times warns (emcee's ``tol``).
MIN_TIMES = 50.0


def autocorrelation(x: npt.ArrayLike) -> FloatArray:
    """The normalised autocorrelation function of each column of ``x`` (shape
    ``(steps, walkers)``) about its own mean, by FFT, averaged over the columns: shape
    ``(steps,)``. NaN where a column is constant or not finite."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    n = a.shape[0]
    size = 1 << max(0, (2 * n - 1).bit_length())  # zero padding past 2n - 1: no wrap-around
    centred = a - a.mean(axis=0)
    f = np.fft.rfft(centred, n=size, axis=0)
    acov = np.fft.irfft(f * np.conj(f), n=size, axis=0)[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        acf = acov / acov[0]
    return np.asarray(acf.mean(axis=1), dtype=np.float64)


def integrated_time(x: npt.ArrayLike, c: float = WINDOW_C) -> float:
    """emcee's integrated autocorrelation time of ``x``, shape ``(steps, walkers)`` (or
    ``(steps,)`` for one walker): see the module docstring. NaN with fewer than 2 steps,
    a constant walker or a value that is not finite."""
    a = np.asarray(x, dtype=np.float64)
    if a.shape[0] < 2 or not np.isfinite(a).all():
        return math.nan
    rho = autocorrelation(a)
    if not np.isfinite(rho).all():
        return math.nan
    taus = 2.0 * np.cumsum(rho) - 1.0
    below = np.arange(len(taus)) < c * taus
    window = int(np.argmin(below)) if not below.all() else len(taus) - 1
    return float(taus[window])


def by_walker(draws: npt.ArrayLike, walkers: int, first: int) -> FloatArray:
    """The whole sweeps of interleaved ensemble draws, each walker apart.

    Parameters
    ----------
    draws
        Draws of ensemble chains, shape ``(chains, n, dim)``, the first at iteration
        ``first`` (``warmup + 1`` for post-warm-up draws).
    walkers
        ``W``: iteration ``t`` recorded walker ``t mod W``, and moves began at
        iteration ``W`` (the iterations before placed the walkers).

    Returns
    -------
    ndarray
        Shape ``(chains, sweeps, W, dim)``: the draws from the first iteration at or
        after ``max(first, W)`` that is a multiple of ``W``, whole sweeps only.
    """
    x = np.asarray(draws, dtype=np.float64)
    chains, n, dim = x.shape
    start = max(first, walkers)
    start += -start % walkers
    skip = min(start - first, n)
    sweeps = (n - skip) // walkers
    kept = x[:, skip : skip + sweeps * walkers]
    return kept.reshape(chains, sweeps, walkers, dim)
