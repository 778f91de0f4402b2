"""The exact gradients of the benchmark targets (core.validation.targets) and of every validation
case (core.validation.suite) against central finite differences of their log densities.

The difference ``(f(x + h e_i) - f(x - h e_i)) / 2h`` has a truncation error of about
``h^2 |f'''| / 6`` and a rounding error of about ``eps |f| / h``. With ``h`` a fraction
``1e-5`` of the coordinate's own scale (so that both terms are small whatever the
target's units: the rotated Gaussian spans 1e-3 to 1e3, the funnel's neck e^-v) the two
are of order ``1e-10`` to ``1e-7`` of the gradient for these smooth targets, so a
relative tolerance of ``1e-5`` (with an absolute floor of ``1e-5`` times the gradient's
norm, for entries that are near 0 beside large ones) passes every right gradient and
fails any wrong term, sign or factor, which changes an entry by far more.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from kameleon.core.interface.chain import FloatArray
from kameleon.core.validation.cases import Case, cases
from kameleon.core.validation.targets import Banana, Flower, Gaussian

RTOL = 1e-5
CASES = {case.name: case for case in cases()}


def _finite_differences(
    f: Callable[[FloatArray], float], x: FloatArray, scale: FloatArray
) -> FloatArray:
    out = np.empty(x.size)
    for i in range(x.size):
        h = 1e-5 * scale[i]
        e = np.zeros(x.size)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def _assert_gradient(
    f: Callable[[FloatArray], float],
    gradient: Callable[[FloatArray], FloatArray],
    x: FloatArray,
    scale: FloatArray,
) -> None:
    g = gradient(x)
    assert isinstance(g, np.ndarray) and g.dtype == np.float64 and g.shape == x.shape
    assert np.isfinite(g).all()
    fd = _finite_differences(f, x, scale)
    np.testing.assert_allclose(g, fd, rtol=RTOL, atol=RTOL * float(np.linalg.norm(fd)))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Any warning, numpy's default floating-point ones included (not underflow, which
    numpy ignores by default), is an error here."""
    with warnings.catch_warnings(), np.errstate(all="warn", under="ignore"):
        warnings.simplefilter("error")
        yield


def _rotated_gaussian() -> Gaussian:
    """Condition number 1e12 in a random rotation (the validation suite's hardest)."""
    q, _ = np.linalg.qr(np.random.default_rng(11).standard_normal((4, 4)))
    c = q @ np.diag(np.logspace(-3, 3, 4) ** 2) @ q.T
    return Gaussian(np.array([1.0, -2.0, 0.5, 3.0]), 0.5 * (c + c.T))


TARGETS = {
    "gaussian-correlated-3d": Gaussian(
        [1.0, -2.0, 0.5], [[2.0, 0.6, 0.1], [0.6, 1.0, -0.3], [0.1, -0.3, 0.5]]
    ),
    "gaussian-rotated-cond-1e12-4d": _rotated_gaussian(),
    "banana-B(0.1,100)-8d": Banana(8, b=0.1, v=100.0),
    "banana-B(0.03,100)-3d": Banana(3),
    "flower-2d": Flower(2),
    "flower-F(5,2,3.5,0.5)-4d": Flower(4, radius=5.0, amplitude=2.0, frequency=3.5, sigma=0.5),
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_gradient_matches_finite_differences(name: str) -> None:
    target = TARGETS[name]
    rng = np.random.default_rng(0)
    # Points drawn at the target's own scale (the Gaussian's: its covariance), where
    # the differences step by 1e-5 of that scale.
    for _ in range(5):
        if isinstance(target, Gaussian):
            x = target.sample(1, rng)[0]
            scale = np.sqrt(target.variance)
        else:
            x = rng.normal(size=target.dim) * (10 if isinstance(target, Flower) else 5)
            x[0] *= 2
            scale = np.maximum(np.abs(x), 1.0)
        _assert_gradient(target.logdensity, target.gradient, x, scale)


def test_gaussian_gradient_is_minus_precision_times_offset() -> None:
    target = TARGETS["gaussian-correlated-3d"]
    assert isinstance(target, Gaussian)
    x = np.array([0.3, 1.0, -2.0])
    expected = -np.linalg.solve(target.covariance, x - target.mean)
    np.testing.assert_allclose(target.gradient(x), expected, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_gradient_far_out_is_quiet(name: str) -> None:
    """At the ends of the float range: no warning, no exception, shape (dim,)."""
    target = TARGETS[name]
    with _quiet():
        for value in (1e300, -1.7e308, 5e-324, 0.0):
            g = target.gradient(np.full(target.dim, value))
            assert g.shape == (target.dim,) and g.dtype == np.float64


def _case_points(case: Case, rng: np.random.Generator) -> list[tuple[FloatArray, FloatArray]]:
    """Random points of a case with the scale of each coordinate."""
    points = []
    for _ in range(5):
        if case.sd is not None:
            x = rng.normal(size=case.dim) * case.sd
            scale = case.sd
        else:
            x = rng.normal(size=case.dim) * 3
            scale = np.maximum(np.abs(x), 1.0)
        points.append((x, scale))
    if case.name.startswith("funnel"):
        # Its neck: v = -6 and -12 where x_i ~ e^(v/2), and a point up its mouth.
        for v in (-6.0, -12.0, 5.0):
            x = np.concatenate([[v], rng.normal(size=case.dim - 1) * np.exp(v / 2)])
            points.append((x, np.concatenate([[1.0], np.full(case.dim - 1, np.exp(v / 2))])))
    if case.name.startswith("eight-schools"):
        # Its neck too: tau = e^-4, every theta within a few tau of mu.
        mu = 4.0
        x = np.concatenate([[mu, -4.0], mu + rng.normal(size=8) * np.exp(-4.0)])
        points.append((x, np.concatenate([[np.exp(-4.0), 1.0], np.full(8, np.exp(-4.0))])))
    return points


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_gradient_matches_finite_differences(name: str) -> None:
    case = CASES[name]
    assert case.gradient is not None
    for x, scale in _case_points(case, np.random.default_rng(1)):
        _assert_gradient(case.logdensity, case.gradient, x, scale)


def test_case_gradients_where_the_log_density_is_minus_infinity() -> None:
    """Not used there: zeros, quietly; finite where the log density is, just beside."""
    funnel = CASES["funnel-5d"]
    schools = CASES["eight-schools-centred-10d"]
    assert funnel.gradient is not None and schools.gradient is not None
    with _quiet():
        for case, x in (
            (funnel, np.array([-800.0, 1.0, 0.0, 0.0, 0.0])),
            (funnel, np.array([-699.0, 1e10, 0.0, 0.0, 0.0])),
            (schools, np.concatenate([[0.0, 25.0], np.zeros(8)])),
            (schools, np.concatenate([[0.0, -400.0], np.ones(8)])),
        ):
            assert case.logdensity(x) == -np.inf
            np.testing.assert_array_equal(case.gradient(x), np.zeros(case.dim))
        for case, x in (
            (funnel, np.array([-800.0, 0.0, 0.0, 0.0, 0.0])),
            (funnel, np.array([-650.0, 1e-140, 0.0, 0.0, 0.0])),
            (schools, np.concatenate([[1.0, -400.0], np.ones(8)])),
        ):
            assert np.isfinite(case.logdensity(x))
            assert np.isfinite(case.gradient(x)).all()
