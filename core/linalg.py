"""Small dense linear algebra shared by the samplers, and the BLAS setting that makes
it reproducible."""

from __future__ import annotations

from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from kameleon.core.base import FloatArray

__all__ = ["jittered_cholesky", "single_threaded_blas"]


def single_threaded_blas() -> Any:
    """Limit BLAS to one thread; usable as a context manager, or called once for the
    whole process.

    A multithreaded BLAS splits a matrix product or factorisation among its threads, and
    the split, and so the order of the floating-point sums, depends on the number of
    threads: the kernel samplers' ``n x n`` and ``m x m`` factorisations then differ in
    the last bits between a process with one thread and one with two, and the chains
    drift apart within a few hundred iterations. Same seed and same told values must give
    the same draws, in process or through any number of service processes, so every
    sampler runs with one BLAS thread: :func:`core.run.run_chain` within this context,
    the service for its whole process. The samplers' matrices are small; threads would
    not make them faster.
    """
    return threadpool_limits(limits=1, user_api="blas")


#: Jitter tried in turn, relative to the mean diagonal, when rounding makes a matrix that
#: is positive definite in exact arithmetic fail to factor.
_JITTER_EXPONENTS = range(-12, -1)


def jittered_cholesky(matrix: FloatArray) -> FloatArray:
    """Lower Cholesky factor of the symmetric ``matrix``, or of ``matrix + delta I`` with
    the smallest ``delta`` of ``10^-12, 10^-11, ..., 10^-2`` times its mean diagonal that
    factors.

    Raises
    ------
    numpy.linalg.LinAlgError
        If none of them factors (the matrix is far from positive definite) or it is not
        finite.

    KAMH's proposal covariance has its own factorisation
    (``core.kamh_proposal.covariance_cholesky``): it factors the matrix it has just
    built in place with LAPACK's ``dpotrf``, twice per iteration, and adds its jitter
    cumulatively in steps of 100. Replacing either with this function would change
    draws: numpy's and scipy's Cholesky factors differ in the last bits for about a
    third of random matrices, and the jitter schedules give different matrices whenever
    one is needed.
    """
    if not np.all(np.isfinite(matrix)):
        raise np.linalg.LinAlgError("the matrix is not finite")
    size = float(np.mean(np.abs(np.diagonal(matrix))))
    identity = np.eye(len(matrix))
    for jitter in (0.0, *(size * 10.0**k for k in _JITTER_EXPONENTS)):
        try:
            return np.linalg.cholesky(matrix + jitter * identity).astype(np.float64, copy=False)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("the matrix is not positive definite")
