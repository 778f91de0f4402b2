"""The KAMH proposal ``N(y, gamma^2 I + s M^T H M)``: draws, densities, factor cache.

``M`` is the ``n x d`` matrix of kernel-gradient rows at ``y`` (see
:mod:`core.samplers.kameleon` for the construction) and ``H = I_n - 1 1^T / n`` centres
its rows. When ``d <= n`` one Cholesky factor of the ``d x d`` covariance gives both the
draw and the density; when ``d > n`` the draw is ``O(n d)`` and the density goes through
``n x n`` matrices (matrix determinant lemma and Woodbury's identity), so no ``d x d``
matrix is formed. The covariance is never inverted.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from kameleon.core.interface.chain import FloatArray
from kameleon.core.kernels.rkhs import gaussian_kernel_grad
from kameleon.core.numerics.arithmetic import log1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import cholesky, dot, matmul, matvec, solve_lower, vecmat

__all__ = [
    "FACTORS",
    "FactorCache",
    "covariance_cholesky",
    "log_density_cholesky",
    "log_density_whitened",
    "log_density_woodbury",
    "proposal_log_density",
    "sample_proposal",
]

_LOG_2PI = log1(2.0 * math.pi)


def covariance_cholesky(gamma2: float, scale2: float, M: FloatArray) -> FloatArray:
    """Lower Cholesky factor of ``R = gamma2 I + scale2 M^T H M`` (``d x d``).

    ``M^T H M = M^T M - n m m^T`` with ``m`` the mean row of ``M``: ``O(n d^2 + d^3)``.
    ``R`` is positive definite, but when ``scale2`` dwarfs ``gamma2`` rounding can make
    the computed matrix indefinite; then ``R + delta I`` with the smallest ``delta`` of
    ``10^-12, 10^-10, ...`` times its mean diagonal that factors is used. Sampling and
    both densities go through this one function, so the proposal stays consistent. (Not
    :func:`core.numerics.linalg.jittered_cholesky`, which would change the draws: see there.)
    """
    n, d = M.shape
    m = vecmat(np.ones(n), M)
    R = matmul(np.transpose(M), M)
    R -= np.outer(m, m / n)
    R *= scale2
    R.flat[:: d + 1] += gamma2
    if not np.all(np.isfinite(R)):
        raise np.linalg.LinAlgError("proposal covariance is not finite")
    mean_diagonal = float(np.trace(R)) / d
    for jitter in (0.0, *_JITTERS):
        R.flat[:: d + 1] += mean_diagonal * jitter
        try:
            return cholesky(R)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("proposal covariance is not positive definite")


# The jitter added in turn, cumulatively, relative to the mean diagonal.
_JITTERS = (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)


def log_density_whitened(w: FloatArray, log_det: float) -> float:
    """``log N(r; 0, R)`` from ``w`` with ``||w||^2 = r^T R^{-1} r`` and ``log det R``."""
    return -0.5 * (w.size * _LOG_2PI + log_det + dot(w, w))


def log_det_cholesky(L: FloatArray) -> float:
    """``log det (L L^T) = 2 log prod L_ii``: the product of the diagonal's mantissas,
    renormalised as it goes, and the sum of its exponents (exact), then one log."""
    mantissa, exponent = 1.0, 0
    for value in np.diagonal(L).tolist():
        m, e = math.frexp(value)
        mantissa, exponent = mantissa * m, exponent + e
        if mantissa < 1e-200:
            m, e = math.frexp(mantissa)
            mantissa, exponent = m, exponent + e
    return 2.0 * (log1(mantissa) + exponent * _LN2)


_LN2 = log1(2.0)


def log_density_cholesky(r: FloatArray, gamma2: float, scale2: float, M: FloatArray) -> float:
    """``log N(r; 0, R)``, ``R = gamma2 I + scale2 M^T H M``, by a Cholesky factor of ``R``.

    ``O(n d^2 + d^3)``: the branch for ``d <= n``.
    """
    L = covariance_cholesky(gamma2, scale2, M)
    return log_density_whitened(solve_lower(L, r), log_det_cholesky(L))


def log_density_woodbury(r: FloatArray, gamma2: float, scale2: float, M: FloatArray) -> float:
    """``log N(r; 0, R)``, ``R = gamma2 I + scale2 M^T H M``, through ``n x n`` matrices.

    With ``G = H M`` (centred rows), ``rho = scale2 / gamma2``,
    ``S = I_n + rho G G^T = L_S L_S^T`` and ``w = L_S^{-1} G r``:
    ``log det R = d log gamma2 + log det S`` (matrix determinant lemma) and
    ``r^T R^{-1} r = (||r||^2 - rho ||w||^2) / gamma2`` (Woodbury). ``O(n^2 d + n^3)``
    and no ``d x d`` matrix: the branch for ``d > n``.
    """
    n = M.shape[0]
    rho = scale2 / gamma2
    G = M - M.mean(axis=0)
    S = matmul(G, np.transpose(G))
    S *= rho
    S.flat[:: n + 1] += 1.0
    L = jittered_cholesky(S)  # S >= I in exact arithmetic; jitter absorbs rounding
    w = solve_lower(L, matvec(G, r))
    log_det = r.size * log1(gamma2) + log_det_cholesky(L)
    quad = (dot(r, r) - rho * dot(w, w)) / gamma2
    return -0.5 * (r.size * _LOG_2PI + log_det + quad)


def proposal_log_density(r: FloatArray, gamma2: float, scale2: float, M: FloatArray) -> float:
    """``log N(r; 0, gamma2 I + scale2 M^T H M)``; the branch is chosen by ``min(n, d)``.

    ``M`` has shape ``(n, d)`` and ``H = I_n - 1 1^T / n`` centres its rows.
    """
    n, d = M.shape
    if d <= n:
        return log_density_cholesky(r, gamma2, scale2, M)
    return log_density_woodbury(r, gamma2, scale2, M)


def sample_proposal(
    rng: np.random.Generator, gamma: float, scale2: float, M: FloatArray
) -> tuple[FloatArray, float]:
    """A draw ``r ~ N(0, R)``, ``R = gamma^2 I + scale2 M^T H M``, and ``log N(r; 0, R)``.

    When ``d <= n`` the Cholesky factor ``L`` of ``R``, which the density needs anyway,
    also gives the draw ``r = L e`` (``d`` normals). When ``d > n``,
    ``r = gamma u + sqrt(scale2) M^T H v`` with ``u ~ N(0, I_d)`` and ``v ~ N(0, I_n)``
    (``H`` is symmetric and idempotent, so the covariance is ``R``): ``O(n d)``, no
    ``d x d`` matrix.
    """
    n, d = M.shape
    if d <= n:
        L = covariance_cholesky(gamma * gamma, scale2, M)
        e = rng.standard_normal(size=(d,))
        return matvec(L, e), log_density_whitened(e, log_det_cholesky(L))
    u = rng.standard_normal(size=(d,))
    v = rng.standard_normal(size=(n,))
    r = gamma * u + math.sqrt(scale2) * (vecmat(v, M) - v.mean() * M.sum(axis=0))
    return r, log_density_woodbury(r, gamma * gamma, scale2, M)


class FactorCache:
    """Recently computed Cholesky factors of ``R_y``, so that ``ask`` factors once.

    Each ``ask`` needs the factor at the current point ``x`` and at the proposal ``x*``;
    the next ``ask`` starts from one of the two. The factor is a pure function of
    ``(y, Z, l, gamma^2, s)``, so remembering it changes no result. The cache is bounded
    in bytes (its factors, and :attr:`ENTRY_OVERHEAD` per entry for the rest), and it
    keeps no ``Z`` alive: an entry refers to its ``Z`` weakly and goes with it (when the
    chain's subsample changes, or its session is deleted), so the subsamples of chains
    that moved on, or of sessions long gone, are not held until the budget pushes their
    factors out.
    """

    #: Bytes of one entry besides its factor's data (key, tuple, array header, node).
    ENTRY_OVERHEAD = 512

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[Any, ...], tuple[FloatArray, float]] = OrderedDict()
        #: ``id(Z)`` -> a weak reference to that ``Z`` and the keys of its entries.
        self._subsamples: dict[
            int, tuple[weakref.ref[FloatArray], dict[tuple[Any, ...], None]]
        ] = {}
        #: ``id(Z)`` of subsamples that died (appended by their weak references'
        #: callbacks, in whichever thread; dropped by the callback, or by the next
        #: :meth:`get` when the cache was busy).
        self._dead: deque[int] = deque()
        self._lock = threading.Lock()

    def get(
        self, y: FloatArray, Z: FloatArray, bandwidth: float, gamma2: float, scale2: float
    ) -> tuple[FloatArray, float]:
        key = (id(Z), Z.shape, y.tobytes(), bandwidth, gamma2, scale2)
        with self._lock:
            self._drop_dead()
            hit = self._entries.get(key) if self._known(Z) is not None else None
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        L = covariance_cholesky(gamma2, scale2, gaussian_kernel_grad(y, Z, bandwidth))
        log_det = log_det_cholesky(L)
        with self._lock:
            self._drop_dead()
            if key not in self._entries:
                self._add(key, Z, (L, log_det))
        return L, log_det

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._subsamples.clear()
            self._dead.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _known(self, Z: FloatArray) -> tuple[Any, dict[tuple[Any, ...], None]] | None:
        """``Z``'s weak reference and keys, if it has entries (under the lock). Those of
        a dead array at the same address (which its callback has always named already)
        are dropped, should one be left."""
        known = self._subsamples.get(id(Z))
        if known is not None and known[0]() is not Z:
            self._dead.append(id(Z))
            self._drop_dead()
            return None
        return known

    def _add(self, key: tuple[Any, ...], Z: FloatArray, entry: tuple[FloatArray, float]) -> None:
        z_id = id(Z)
        known = self._known(Z)
        if known is None:
            dead, lock = self._dead, self._lock

            def died(_: object) -> None:
                dead.append(z_id)
                # At once if no thread is in the cache (this one may be: then the next
                # get drops them).
                if lock.acquire(blocking=False):
                    try:
                        self._drop_dead()
                    finally:
                        lock.release()

            try:
                ref = weakref.ref(Z, died)
            except TypeError:  # an array that cannot be referred to weakly: not cached
                return
            known = self._subsamples[z_id] = (ref, {})
        known[1][key] = None
        self._entries[key] = entry
        self.bytes += entry[0].nbytes + self.ENTRY_OVERHEAD
        while self.bytes > self.max_bytes and self._entries:
            old_key, (old, _) = self._entries.popitem(last=False)
            self.bytes -= old.nbytes + self.ENTRY_OVERHEAD
            keys = self._subsamples[old_key[0]][1]
            del keys[old_key]
            if not keys:
                del self._subsamples[old_key[0]]

    def _drop_dead(self) -> None:
        """Forget the entries of subsamples that died (under the lock)."""
        while self._dead:
            known = self._subsamples.pop(self._dead.popleft(), None)
            if known is None:
                continue
            for key in known[1]:
                L, _ = self._entries.pop(key)
                self.bytes -= L.nbytes + self.ENTRY_OVERHEAD


FACTORS = FactorCache(max_bytes=64 * 2**20)
