"""Arithmetic whose result is the same on every CPU: why it must be, what is exact
everywhere, and the elementary functions (the linear algebra is :mod:`core.numerics.matrices`).

A proposal must depend only on the seed, the chain and the values told, whichever
process or machine computes it (a session's service processes may run on different
machines, and each recomputes a chain's proposal from its stored state). Three things
in an ordinary numpy/scipy program break that, each by the last bits, which a Markov
chain then amplifies into different draws within a few hundred iterations:

* BLAS and LAPACK (``@``, ``np.dot``, ``np.linalg.cholesky``, scipy's ``dpotrf``,
  ``dtrsv``, ``cho_solve``, ...): OpenBLAS picks a kernel for the CPU (Haswell,
  SkylakeX, Zen, Sandybridge, ...), and the kernels sum in different orders, with or
  without fused multiply-adds; a multithreaded BLAS also splits sums by thread.
* numpy's transcendental ufuncs: ``np.exp``, ``np.log``, ``np.sin``, ``np.cos`` have
  SIMD variants that numpy picks at run time for the CPU (AVX512F and others).
* the C library's ``exp``, ``log``, ``sin``, ``cos``, ``pow`` (``math.exp`` and
  friends, and numpy's ufuncs where it has no SIMD variant): glibc picks an FMA or a
  non-FMA build at run time. On this project's test machine the two differ for about
  7 in 10 000 arguments of ``exp``, ``sin`` and ``cos``.

What is exact everywhere: IEEE 754 addition, subtraction, multiplication, division
and square root of two doubles are correctly rounded, so each gives one result on any
CPU; numpy's elementwise ``+ - * /`` and ``sqrt`` are those operations, one at a time
(no ufunc fuses a multiplication into an addition), and so are Python's float
operators. ``np.add.reduce`` of a float64 array sums in an order fixed by its shape and layout
alone: along a contiguous axis numpy's pairwise summation (eight accumulators, plain C
compiled without reassociation), along another axis one elementwise addition per
slab; the same for every CPU feature set numpy dispatches on. ``np.rint``, ``np.ldexp``, ``math.frexp``, comparisons and integer
arithmetic are exact.

Everything here and in :mod:`core.numerics.matrices` is built from those operations only:

* :func:`~core.numerics.matrices.dot`, :func:`~core.numerics.matrices.matvec`,
  :func:`~core.numerics.matrices.vecmat`: elementwise products added by
  ``np.add.reduce`` along one axis. :func:`~core.numerics.matrices.matmul` does the same
  for small matrices; for large ones it splits both factors into slices whose products
  BLAS computes exactly (no rounding, so no kernel, order or thread count can change
  them), and adds them in a fixed order: BLAS speed, the same bits everywhere.
* :func:`~core.numerics.matrices.cholesky`, :func:`~core.numerics.matrices.solve_lower`,
  :func:`~core.numerics.matrices.solve_upper`: a blocked left-looking Cholesky
  factorisation and substitutions, made of those products (up to 16 x 16, the same
  operations on Python floats).
* :func:`exp`, :func:`log`, :func:`sin`, :func:`cos` on arrays, and :func:`exp1`,
  :func:`log1`, :func:`pow1` on Python floats: table-driven range reduction and short
  polynomials, with the tables computed in decimal at import. Accurate to about one
  unit in the last place (not correctly rounded); the scalar and array versions perform
  the same operations, so they agree bit for bit.
* :func:`~core.numerics.matrices.squared_distances`,
  :func:`~core.numerics.matrices.pairwise_distances`: instead of scipy's ``cdist`` and
  ``pdist``.

``tests/core/test_reproducible_arithmetic.py`` runs every sampler under several
OpenBLAS kernels, BLAS thread counts, numpy CPU-feature sets and glibc builds, and
compares the draws bit for bit. What this does not cover (numpy's normal sampler,
other numpy versions, other architectures) is written down in PROTOCOL.md, "Guarantees".
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]  # as core.interface.sampler's (which imports this module)

__all__ = ["cos", "exp", "exp1", "log", "log1", "pow1", "sin"]


# --------------------------------------------------------------------------- tables


def _decimal_tables() -> tuple[list[float], list[float], list[float], list[float], list[float]]:
    """``2^(j/256)``, ``log(1 + j/64)`` for ``j = -16..32`` (as high and low parts) and ``sin``, ``cos`` of
    ``j pi / 512``, computed in 40-digit decimal arithmetic (software, the same on every
    machine) and rounded once to doubles."""
    with localcontext() as context:
        context.prec = 40
        two = Decimal(2)
        exp2 = [float(two ** (Decimal(j) / 256)) for j in range(256)]
        log_hi, log_lo = [], []
        for j in range(-16, 33):
            value = (1 + Decimal(j) / 64).ln()
            hi = float(value)
            log_hi.append(hi)
            log_lo.append(float(value - Decimal(hi)))
        pi = Decimal("3.141592653589793238462643383279502884197")
        quarter_sin, quarter_cos = [], []
        for j in range(257):  # 0 to pi/2
            x = pi * j / 512
            s, c, term, k = Decimal(0), Decimal(0), Decimal(1), 0
            while abs(term) > Decimal("1e-45"):  # Taylor series of cos and sin at once
                if k % 4 == 0:
                    c += term
                elif k % 4 == 1:
                    s += term
                elif k % 4 == 2:
                    c -= term
                else:
                    s -= term
                k += 1
                term = term * x / k
            quarter_sin.append(float(s))
            quarter_cos.append(float(c))
        # sin(q pi/2 + a) and cos(q pi/2 + a) from sin a and cos a: exact signs.
        sin_table, cos_table = [], []
        for j in range(1024):
            q, a = divmod(j, 256)
            sa, ca = quarter_sin[a], quarter_cos[a]
            sin_table.append((sa, ca, -sa, -ca)[q])
            cos_table.append((ca, -sa, -ca, sa)[q])
    return exp2, log_hi, log_lo, sin_table, cos_table


_EXP2, _LOG_HI, _LOG_LO, _SIN_TABLE, _COS_TABLE = _decimal_tables()
_EXP2_ARRAY = np.array(_EXP2)
_LOG_HI_ARRAY = np.array(_LOG_HI + [0.0] * 15)  # 64 entries: any index & 63 is valid
_LOG_LO_ARRAY = np.array(_LOG_LO + [0.0] * 15)
_SIN_ARRAY = np.array(_SIN_TABLE)
_COS_ARRAY = np.array(_COS_TABLE)

# ln 2 in two parts (fdlibm's): the first has 32 significant bits, so k * _LN2_HI is
# exact for |k| < 2^21 (every k that exp and log meet).
_LN2_HI = float.fromhex("0x1.62e42feep-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_LN2_N_HI = _LN2_HI / 256  # exact
_LN2_N_LO = _LN2_LO / 256
_INV_LN2_N = float.fromhex("0x1.71547652b82fep+8")  # 256 / ln 2
# pi / 512 in two parts of 33 and 53 bits: k * _PI_N_1 is exact for |k| < 2^20, and
# the part left out is below 2^-95 k.
_PI_N_1 = float.fromhex("0x1.921fb544p-8")
_PI_N_2 = float.fromhex("0x1.0b4611a626331p-42")
_INV_PI_N = float.fromhex("0x1.45f306dc9c883p+7")  # 512 / pi

_EXP_MAX = 709.782712893384  # above: overflow to inf
_EXP_MIN = -745.1332191019412  # below: 0

# Taylor coefficients, rounded to doubles by Python's parser.
_C2, _C3, _C4, _C5 = 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120
_T3, _T5, _T7, _T9 = 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9


# --------------------------------------------------------------------------- exp, log


def exp1(x: float) -> float:
    """``e^x`` of a float, the same bits as :func:`exp` gives for it."""
    x = float(x)
    if not x <= _EXP_MAX:
        return math.inf if x > 0 else math.nan
    if x < _EXP_MIN:
        return 0.0
    k = round(x * _INV_LN2_N)
    r = (x - k * _LN2_N_HI) - k * _LN2_N_LO
    p = r * _C4
    p = (p + _C3) * r
    p = (p + _C2) * (r * r)
    p = p + r
    t = _EXP2[k & 255]
    return math.ldexp(t * p + t, k >> 8)


def exp(x: Any) -> FloatArray:
    """``e^x`` elementwise (see the module docstring); ``O(1)`` numpy steps."""
    x = np.asarray(x, dtype=np.float64)
    if x.size and x.min() >= _EXP_MIN and x.max() <= _EXP_MAX:
        return _exp(x)  # no floating-point exception to silence
    with np.errstate(all="ignore"):  # overflow gives inf, as it should
        out = _exp(x)
    out = np.where(x > _EXP_MAX, math.inf, np.where(x < _EXP_MIN, 0.0, out))
    out[np.isnan(x)] = math.nan
    return out


def _exp(x: FloatArray) -> FloatArray:
    kf = np.rint(x * _INV_LN2_N)
    r = x - kf * _LN2_N_HI
    r -= kf * _LN2_N_LO
    p = r * _C4
    p += _C3
    p *= r
    p += _C2
    p *= r * r
    p += r
    k = kf.astype(np.int64)  # out of range (or NaN): any index, put right below
    t = _EXP2_ARRAY[k & 255]
    p *= t
    p += t
    out: FloatArray = np.ldexp(p, k >> 8)
    return out


def log1(x: float) -> float:
    """Natural logarithm of a float, the same bits as :func:`log` gives for it."""
    x = float(x)
    if not x > 0.0:
        return -math.inf if x == 0.0 else math.nan
    if x == math.inf:
        return math.inf
    mantissa, e = math.frexp(x)  # x = mantissa 2^e, mantissa in [1/2, 1): exact
    m = mantissa * 2.0
    e -= 1
    if m >= 1.5:  # m in [3/4, 3/2), so that log(m) is small where log(x) is
        m *= 0.5
        e += 1
    j = round((m - 1.0) * 64.0)  # the nearest table point c = 1 + j/64, j in -16..32
    c = 1.0 + j * 0.015625
    u = m - c  # exact
    # log(m) = log(c) + 2 atanh(s), s = u / (2c + u), |s| < 1/256
    s = u / ((c + c) + u)
    s2 = s * s
    poly = s2 * (_T3 + s2 * (_T5 + s2 * (_T7 + s2 * _T9)))
    twice = s + s
    low = (e * _LN2_LO + _LOG_LO[j + 16]) + twice * poly
    return (e * _LN2_HI + _LOG_HI[j + 16]) + (twice + low)


def log(x: Any) -> FloatArray:
    """Natural logarithm elementwise (see the module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):  # 0, inf, negative and NaN are set at the end
        return _log(x)


def _log(x: FloatArray) -> FloatArray:
    mantissa, e = np.frexp(x)
    upper = mantissa >= 0.75
    m = mantissa * np.where(upper, 1.0, 2.0)  # in [3/4, 3/2) for positive finite x
    ef = (e - 1 + upper).astype(np.float64)
    jf = np.rint((m - 1.0) * 64.0)
    c = jf * 0.015625
    c += 1.0
    u = m - c
    den = c + c
    den += u
    s = u / den
    s2 = s * s
    poly = s2 * _T9
    poly += _T7
    poly *= s2
    poly += _T5
    poly *= s2
    poly += _T3
    poly *= s2
    twice = s + s
    index = (jf.astype(np.int64) + 16) & 63  # 0..48 for positive finite x
    low = ef * _LN2_LO
    low += _LOG_LO_ARRAY[index]
    poly *= twice
    low += poly
    high = ef * _LN2_HI
    high += _LOG_HI_ARRAY[index]
    low += twice
    high += low
    if x.size and not (x.min() > 0.0 and x.max() < math.inf):
        high[x == 0.0] = -math.inf
        high[x == math.inf] = math.inf
        high[~(x >= 0.0)] = math.nan
    return high


def pow1(x: float, y: float) -> float:
    """``x^y`` for ``x > 0``: ``exp1(y * log1(x))``, or ``1 / sqrt(x)`` for
    ``y = -1/2`` (the adaptation schedules' usual exponent, exact to half a unit)."""
    if y == -0.5:
        return 1.0 / math.sqrt(x)
    return exp1(y * log1(x))


# --------------------------------------------------------------------------- sin, cos


def _reduce_pi(x: FloatArray) -> tuple[npt.NDArray[np.int64], FloatArray, FloatArray]:
    """``x = k pi/512 + r``, ``|r| <= pi/1024``: the table index ``k mod 1024`` and the
    polynomials ``sin r`` and ``cos r - 1`` (terms left out: below ``2^-60``)."""
    kf = np.rint(x * _INV_PI_N)
    r = x - kf * _PI_N_1
    r -= kf * _PI_N_2
    r2 = r * r
    sin_r = r2 * _C5
    sin_r -= _C3
    sin_r *= r2
    sin_r *= r
    sin_r += r
    cos_m1 = r2 * _C4
    cos_m1 -= _C2
    cos_m1 *= r2
    index = kf.astype(np.int64) & 1023  # NaN: any index, the result is NaN
    return index, sin_r, cos_m1


def sin(x: Any) -> FloatArray:
    """``sin x`` elementwise: ``sin(c + r) = sin c + (sin c (cos r - 1) + cos c sin r)``
    with ``c = k pi/512`` from a table. About one unit in the last place for
    ``|x| < 2^20 pi/512``; beyond, deterministic but less accurate."""
    x = np.asarray(x, dtype=np.float64)
    # Past about 1e154 the reduction's square overflows: the result is NaN or infinite
    # there (deterministic, and a proposal built on it is rejected), without a warning.
    with np.errstate(invalid="ignore", over="ignore"):
        index, sin_r, cos_m1 = _reduce_pi(x)
        s, c = _SIN_ARRAY[index], _COS_ARRAY[index]
        out: FloatArray = s * cos_m1
        out += c * sin_r
        out += s
    return out


def cos(x: Any) -> FloatArray:
    """``cos x`` elementwise: ``cos(c + r) = cos c + (cos c (cos r - 1) - sin c sin r)``
    (see :func:`sin`)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # see sin
        index, sin_r, cos_m1 = _reduce_pi(x)
        s, c = _SIN_ARRAY[index], _COS_ARRAY[index]
        out: FloatArray = c * cos_m1
        out -= s * sin_r
        out += c
    return out
