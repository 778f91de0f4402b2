"""Linear algebra whose result is the same on every CPU (why, and what is exact everywhere:
:mod:`core.numerics.arithmetic`): :func:`dot`, :func:`matvec`, :func:`vecmat` add
elementwise products by ``np.add.reduce`` along one axis; :func:`matmul` does the same
for small matrices and, for large ones, splits both factors into slices whose products
BLAS computes exactly, added in a fixed order; :func:`cholesky`, :func:`solve_lower`,
:func:`solve_upper` (and :func:`solve_lower_rows`, for many right-hand sides) are a
blocked left-looking Cholesky factorisation and substitutions made of those products;
:func:`squared_distances` and :func:`pairwise_distances` replace scipy's ``cdist`` and
``pdist``; :func:`symmetric_eigen` is a Jacobi eigensolver.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]  # as core.interface.chain's

__all__ = [
    "cholesky",
    "dot",
    "matmul",
    "matvec",
    "pairwise_distances",
    "solve_lower",
    "solve_lower_rows",
    "solve_upper",
    "squared_distances",
    "symmetric_eigen",
    "vecmat",
]

# Elements of the temporary product that matmul and squared_distances form per block.
_BLOCK = 1 << 17


def dot(a: FloatArray, b: FloatArray) -> float:
    """``sum_i a_i b_i`` of two vectors, in numpy's pairwise order."""
    return float(np.add.reduce(np.multiply(a, b)))


def matvec(A: FloatArray, x: FloatArray) -> FloatArray:
    """``A x`` for ``A`` of shape ``(n, m)``: entry ``i`` is ``dot(A[i], x)``."""
    product = np.multiply(A, x)  # a new C-contiguous array: its last axis is contiguous
    out: FloatArray = np.add.reduce(product, axis=-1)
    return out


def vecmat(x: FloatArray, A: FloatArray) -> FloatArray:
    """``x A`` for ``A`` of shape ``(n, m)``: the rows ``x_i A_i`` added elementwise, in
    the order of ``i``."""
    product = np.multiply(np.asarray(x)[:, None], A)
    out: FloatArray = np.add.reduce(product, axis=0)
    return out


def matmul(A: FloatArray, B: FloatArray) -> FloatArray:
    """``A B`` for shapes ``(n, k)`` and ``(k, m)``.

    Small products (``n k m <= 2^15``): the slabs ``A[:, l] B[l]`` added elementwise in
    the order of ``l``. Larger ones go through BLAS, made exact:
    :func:`_exact_products`. Either way the result depends only on ``A`` and ``B``.
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    n, k = A.shape
    m = B.shape[1]
    if n * k * m > _SMALL_PRODUCT:
        product = _exact_products(A, B)
        if product is not None:
            return product
    out = np.empty((n, m))
    rows = max(1, _BLOCK // max(1, k * m))
    for start in range(0, n, rows):
        block = np.multiply(A[start : start + rows, :, None], B[None, :, :])
        np.add.reduce(block, axis=1, out=out[start : start + rows])
    return out


_SMALL_PRODUCT = 1 << 15


# Entries whose magnitudes lie outside [2^-400, 2^400] (but not zero) take the slow path:
# the slices' products stay far from underflow and overflow.
_EXPONENT_RANGE = 400


_SLICES = 3


def _slices(A: FloatArray, axis: int, beta: int) -> list[FloatArray] | None:
    """``A = A_1 + A_2 + A_3 + rest``: each slice's entries in a row (``axis=1``) or
    column (``axis=0``) are multiples of ``2^(e + beta - 53)``, ``2^e`` a power of two
    above their largest magnitude, so they have at most ``53 - beta`` significant bits
    relative to it (Ozaki, Ogita, Oishi and Rump 2012, "Error-free transformations of
    matrix multiplication"). ``(x + sigma) - sigma`` rounds ``x`` to that grid and
    ``x - slice`` is exact: IEEE operations only. ``None`` if an entry is not finite or
    outside the safe range."""
    if not np.all(np.isfinite(A)):
        return None
    magnitude = np.abs(A)
    nonzero = magnitude[magnitude > 0.0]
    if nonzero.size and not (
        nonzero.min() >= 2.0**-_EXPONENT_RANGE and nonzero.max() <= 2.0**_EXPONENT_RANGE
    ):
        return None
    rest = np.array(A)
    out = []
    for _ in range(_SLICES):
        _, e = np.frexp(np.max(np.abs(rest), axis=axis, keepdims=True))
        sigma = np.ldexp(0.75, e + beta)
        piece = rest + sigma
        piece -= sigma
        rest -= piece
        out.append(piece)
    return out


def _exact_products(A: FloatArray, B: FloatArray) -> FloatArray | None:
    """``A B`` as ``sum_{p + q <= 4} A_p B_q`` over the slices of :func:`_slices`, with
    ``beta`` chosen so that every sum of ``k`` products of two slices' entries is a
    double: BLAS then computes each ``A_p B_q`` exactly, whatever its kernel, its order
    of summation, its fused multiply-adds or its threads, and the six exact products
    are added in a fixed order. The terms left out are below ``2^-60`` of
    ``max |A_i.| max |B_.j|``, far below the rounding of the sum. ``None``: use the
    slow path."""
    k = A.shape[1]
    beta = (53 + max(1, k - 1).bit_length() + 1) // 2 + 1
    a = _slices(A, 1, beta)
    b = _slices(B, 0, beta)
    if a is None or b is None:
        return None
    out: FloatArray = np.matmul(a[2], b[0])
    for p, q in ((1, 1), (0, 2), (1, 0), (0, 1), (0, 0)):
        out += np.matmul(a[p], b[q])
    return out


def cholesky(A: FloatArray) -> FloatArray:
    """Lower Cholesky factor ``L`` of the symmetric positive definite ``A``
    (``A = L L^T``; only the lower triangle of ``A`` is read).

    Left-looking, in panels of ``_PANEL`` columns: each panel is first brought up to
    date with the columns before it by one :func:`matmul` (the ``O(n^3)`` part), then
    factored column by column with :func:`matvec`.

    Raises
    ------
    numpy.linalg.LinAlgError
        If a pivot is not positive (or not a number): ``A`` is not positive definite,
        numerically, or not finite.
    """
    A = np.asarray(A, dtype=np.float64)
    n = A.shape[0]
    if n <= _SMALL:
        return _small_cholesky(A)
    L = np.zeros((n, n))
    for start in range(0, n, _PANEL):
        stop = min(n, start + _PANEL)
        panel = np.array(A[start:, start:stop])
        if start:
            panel -= matmul(L[start:, :start], np.transpose(L[start:stop, :start]))
        for c in range(stop - start):
            j = start + c
            column = panel[c:, c] - matvec(L[j:, start:j], L[j, start:j])
            pivot = float(column[0])
            if not pivot > 0.0 or pivot == math.inf:
                raise np.linalg.LinAlgError("the matrix is not positive definite")
            root = math.sqrt(pivot)
            L[j, j] = root
            L[j + 1 :, j] = column[1:] / root
    return L


_PANEL = 32


# Up to this size, factors and solves run on Python floats: the same IEEE operations,
# without numpy's overhead per call.
_SMALL = 16


def _small_cholesky(A: FloatArray) -> FloatArray:
    """:func:`cholesky` on Python floats, sums in the order of the index."""
    n = A.shape[0]
    a = A.tolist()
    L = [[0.0] * n for _ in range(n)]
    for j in range(n):
        row_j = L[j]
        for i in range(j, n):
            row_i = L[i]
            total = a[i][j]
            for k in range(j):
                total -= row_i[k] * row_j[k]
            if i == j:
                if not total > 0.0 or total == math.inf:
                    raise np.linalg.LinAlgError("the matrix is not positive definite")
                row_j[j] = math.sqrt(total)
            else:
                row_i[j] = total / row_j[j]
    return np.array(L)


def solve_lower(L: FloatArray, b: FloatArray) -> FloatArray:
    """``L^-1 b`` for a lower triangular ``L`` with a non-zero diagonal (forward
    substitution, ``O(n^2)``)."""
    n = L.shape[0]
    if n <= _SMALL:
        rows, values = L.tolist(), np.asarray(b, dtype=np.float64).tolist()
        out: list[float] = []
        for i in range(n):
            total = values[i]
            row = rows[i]
            for k in range(i):
                total -= row[k] * out[k]
            out.append(total / row[i])
        return np.array(out)
    x = np.zeros(n)
    for i in range(n):
        x[i] = (float(b[i]) - dot(L[i, :i], x[:i])) / float(L[i, i])
    return x


def solve_lower_rows(L: FloatArray, rows: FloatArray) -> FloatArray:
    """``L^-1 r`` for each row ``r`` of ``rows`` (shape ``(n, d)``), ``L`` lower triangular
    with a non-zero diagonal: forward substitution over the columns, all rows at once,
    each column's products added by :func:`matvec`."""
    L = np.asarray(L, dtype=np.float64)
    r = np.asarray(rows, dtype=np.float64)
    u = np.zeros_like(r)
    for i in range(L.shape[0]):
        total = r[:, i] - matvec(u[:, :i], L[i, :i]) if i else r[:, i]
        u[:, i] = total / L[i, i]
    return u


def solve_upper(U: FloatArray, b: FloatArray) -> FloatArray:
    """``U^-1 b`` for an upper triangular ``U`` with a non-zero diagonal (back
    substitution, ``O(n^2)``)."""
    n = U.shape[0]
    if n <= _SMALL:
        rows, values = U.tolist(), np.asarray(b, dtype=np.float64).tolist()
        out = [0.0] * n
        for i in range(n - 1, -1, -1):
            total = values[i]
            row = rows[i]
            for k in range(i + 1, n):
                total -= row[k] * out[k]
            out[i] = total / row[i]
        return np.array(out)
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (float(b[i]) - dot(U[i, i + 1 :], x[i + 1 :])) / float(U[i, i])
    return x


def squared_distances(X: FloatArray, Y: FloatArray) -> FloatArray:
    """``D[i, j] = ||X_i - Y_j||^2`` for shapes ``(m, d)`` and ``(n, d)``."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    m, d = X.shape
    n = Y.shape[0]
    out = np.empty((m, n))
    rows = max(1, _BLOCK // max(1, n * d))
    for start in range(0, m, rows):
        diff = np.subtract(X[start : start + rows, None, :], Y[None, :, :])
        np.multiply(diff, diff, out=diff)
        np.add.reduce(diff, axis=-1, out=out[start : start + rows])
    return out


def pairwise_distances(points: FloatArray) -> FloatArray:
    """The Euclidean distances of every pair ``i < j`` of rows, in the order of
    ``scipy.spatial.distance.pdist``."""
    points = np.asarray(points, dtype=np.float64)
    i, j = np.triu_indices(points.shape[0], 1)
    diff = points[i]
    diff -= points[j]
    diff *= diff
    out: FloatArray = np.sqrt(np.add.reduce(diff, axis=-1))
    return out


def _round_robin(n: int) -> tuple[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]], ...]:
    """The rounds of a round-robin tournament of ``n`` (even) players: ``n - 1`` rounds of
    ``n / 2`` disjoint pairs ``(p, q)``, ``p < q``, each pair met once."""
    players = list(range(n))
    rounds = []
    for _ in range(n - 1):
        pairs = sorted(
            (min(players[i], players[n - 1 - i]), max(players[i], players[n - 1 - i]))
            for i in range(n // 2)
        )
        rounds.append(
            (np.array([p for p, _ in pairs], dtype=np.intp), np.array([q for _, q in pairs]))
        )
        players = [players[0], players[-1], *players[1:-1]]
    return tuple(rounds)


def symmetric_eigen(A: FloatArray, sweeps: int = 60) -> tuple[FloatArray, FloatArray]:
    """Eigenvalues ``w`` and orthonormal eigenvectors ``V`` (columns) of the symmetric
    ``A``: ``A = V diag(w) V^T``, the same bits on every CPU (LAPACK's ``syevd`` is not).

    Parallel cyclic Jacobi (Golub and Van Loan, section 8.5.4): each sweep is the ``n - 1``
    rounds of a round-robin tournament of the indices (a dummy added when ``n`` is odd),
    and each round rotates its ``n / 2`` disjoint pairs at once, zeroing their
    off-diagonal elements, with elementwise numpy operations only (exact in IEEE
    arithmetic, so independent of the CPU and of the memory layout). A pair whose
    off-diagonal element is below ``1e-15`` times the geometric mean of its two diagonal
    elements is left alone (Demmel and Veselic 1992: relative accuracy for each
    eigenvalue of a definite matrix); the sweeps stop when a whole sweep rotated nothing,
    or after ``sweeps``. For the small matrices of the samplers' adaptation (``n`` up to
    a few tens), not for a hot path.
    """
    n = len(A)
    m = n + n % 2
    B = np.zeros((m, m))
    B[:n, :n] = np.asarray(A, dtype=np.float64)
    V = np.eye(m)
    rounds = _round_robin(m)
    for _ in range(sweeps):
        rotated = False
        for p, q in rounds:
            apq = B[p, q]
            app = B[p, p]
            aqq = B[q, q]
            skip = ~(np.abs(apq) > 1e-15 * np.sqrt(np.abs(app * aqq)))
            if skip.all():
                continue
            rotated = True
            safe = np.where(skip, 1.0, apq)
            theta = (aqq - app) / (2.0 * safe)
            big = np.abs(theta) > 1e150
            root = np.sqrt(np.where(big, 1.0, theta * theta) + 1.0)
            t = np.where(
                big,
                0.5 / np.where(big, theta, 1.0),
                np.copysign(1.0, theta) / (np.abs(theta) + root),
            )
            t = np.where(skip, 0.0, t)
            c = 1.0 / np.sqrt(t * t + 1.0)
            s = t * c
            column_p, column_q = B[:, p], B[:, q]
            B[:, p] = c * column_p - s * column_q
            B[:, q] = s * column_p + c * column_q
            row_p, row_q = B[p, :], B[q, :]
            B[p, :] = c[:, None] * row_p - s[:, None] * row_q
            B[q, :] = s[:, None] * row_p + c[:, None] * row_q
            B[p, q] = np.where(skip, B[p, q], 0.0)
            B[q, p] = B[p, q]
            column_p, column_q = V[:, p], V[:, q]
            V[:, p] = c * column_p - s * column_q
            V[:, q] = s * column_p + c * column_q
        if not rotated:
            break
    return np.diagonal(B)[:n].copy(), V[:n, :n].copy()
