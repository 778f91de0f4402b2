"""The kernel samplers with default options on a target whose axes are rotated away from
the coordinates and whose scales differ a hundredfold (BENCHMARKS.md, "Kernel samplers
after the preconditioner learns through warm-up").

A preconditioner that only rescales the coordinates cannot see the rotation, and one
frozen from the last scouting window of a short warm-up has not yet learnt the
covariance: the kernel methods then crawl along the wide directions and report standard
deviations of a fraction of the truth. With the map learning through warm-up every
kernel sampler is right at a short warm-up.
"""

from __future__ import annotations

import numpy as np
import pytest

from kameleon.core.running.inprocess import sample

pytestmark = pytest.mark.slow  # statistical: a few seconds per sampler

DIM = 8
SEED = 3
CHAINS, WARMUP, DRAWS = 2, 3000, 1500
_Q, _ = np.linalg.qr(np.random.default_rng(17).standard_normal((DIM, DIM)))
SCALES = np.geomspace(0.1, 10.0, DIM)


def _logdensity(x: np.ndarray) -> float:
    z = (_Q.T @ x) / SCALES
    return -0.5 * float(z @ z)


@pytest.mark.parametrize("name", ["kameleon", "kmc-lite", "kmc-finite"])
def test_a_rotated_gaussian_with_scales_a_hundredfold_apart(name: str) -> None:
    draws = sample(
        _logdensity,
        DIM,
        algorithm=name,
        chains=CHAINS,
        warmup=WARMUP,
        iterations=DRAWS,
        seed=SEED,
        initial=np.zeros(DIM),
        warn=False,
    )
    # The draws along the target's principal axes, standardised: each is N(0, 1).
    z = (draws.reshape(-1, DIM) @ _Q) / SCALES
    sd = z.std(axis=0)
    # Tolerance: a right chain with an effective sample size of 100 or more along every
    # axis (these runs have several hundred) estimates a unit sd within about
    # sqrt(1 / (2 ESS)) <= 0.07, so [0.75, 1.3] is more than 3.5 of its standard errors
    # wide; the code before the map learnt through warm-up gave 0.2-0.7 along the wide
    # axes at this budget (KAMH 0.69 and 1.3). The seed is fixed and the arithmetic machine-independent,
    # so the outcome is the same on every run.
    assert np.all((sd > 0.75) & (sd < 1.3)), f"sd along the principal axes {sd}"
    # The mean's standard error along an axis is at most 0.15 for an ESS of 50 or more:
    # 0.6 is 4 of them (the code before gave 1.2).
    assert np.all(np.abs(z.mean(axis=0)) < 0.6), f"means {z.mean(axis=0)}"
