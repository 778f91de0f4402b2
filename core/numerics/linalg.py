"""Small dense linear algebra shared by the samplers (on :mod:`core.numerics.matrices`, the
same bits on every CPU), and the process's BLAS setting."""

from __future__ import annotations

from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics.matrices import cholesky

__all__ = ["jittered_cholesky", "single_threaded_blas"]


def single_threaded_blas() -> Any:
    """Limit BLAS to one thread; usable as a context manager, or called once for the
    whole process.

    The samplers' draws do not go through BLAS (:mod:`core.numerics.arithmetic`), so the thread
    count does not change them; what still uses BLAS (diagnostics, user code in the same
    process) works on small matrices, which threads would not make faster, and a
    service process or an in-process run should not compete with its neighbours for
    cores: :func:`core.running.inprocess.run_chain` runs within this context, the service limits its
    whole process.
    """
    return threadpool_limits(limits=1, user_api="blas")


#: Jitter tried in turn, relative to the mean diagonal, when rounding makes a matrix that
#: is positive definite in exact arithmetic fail to factor (literals: the parser rounds
#: them the same everywhere, where ``10.0**k`` would be the C library's ``pow``).
_JITTERS = (1e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


def jittered_cholesky(matrix: FloatArray) -> FloatArray:
    """Lower Cholesky factor of the symmetric ``matrix``, or of ``matrix + delta I`` with
    the smallest ``delta`` of ``10^-12, 10^-11, ..., 10^-2`` times its mean diagonal that
    factors.

    Raises
    ------
    numpy.linalg.LinAlgError
        If none of them factors (the matrix is far from positive definite) or it is not
        finite.

    The factor is :func:`core.numerics.matrices.cholesky`'s, the same bits on every CPU.
    KAMH's proposal covariance has its own jitter schedule
    (``core.kernels.kamh_proposal.covariance_cholesky``): cumulative, in steps of 100.
    """
    if not np.all(np.isfinite(matrix)):
        raise np.linalg.LinAlgError("the matrix is not finite")
    size = float(np.mean(np.abs(np.diagonal(matrix))))
    identity = np.eye(len(matrix))
    for jitter in (0.0, *(size * k for k in _JITTERS)):
        try:
            return cholesky(matrix + jitter * identity)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("the matrix is not positive definite")
