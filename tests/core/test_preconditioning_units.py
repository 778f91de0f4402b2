"""The learnt map on a target whose scales span five orders of magnitude (BENCHMARKS.md
section 4, "A regression the window weights brought").

The correlated 6-d Gaussian of the validation suite with standard deviations 1e-3 to
1e2, chains started as the service starts them (uniformly in ``(-2, 2)^6``: two thousand
standard deviations out in the narrowest coordinate). Each scouting window's covariance
is shrunk toward the previous estimate, and the first previous estimate is the guess
``initial_scale^2 I`` in the user's units. Shrunk linearly, a coordinate of variance
``1e-6`` kept a share ``prod (1 - a)`` of that unit through the windows: the map ended
scouting tens of times too wide along the narrow directions, and every kernel sampler
was wrong at a warm-up of 5 000 (R-hat 1.6 to 2.7). The variances are now shrunk in
logarithms where the window's is the smaller (:func:`core.tuning.preconditioning.shrink`).
"""

from __future__ import annotations

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.tuning.preconditioning import scouting_iterations, shrink
from kameleon.core.validation.cases import cases

CASE = next(c for c in cases() if c.name == "gaussian-scales-1e-3..1e2-correlated-6d")
WARMUP = 5000


def _covariance() -> np.ndarray:
    """The case's covariance (the case keeps its log density, mean and sds): the log
    density is Gaussian, so its Hessian is ``-Sigma^-1``, which finite differences of a
    quadratic give up to rounding (in coordinates scaled by the sds, where it is well
    conditioned)."""
    sd = CASE.sd
    dim = CASE.dim
    h = np.zeros((dim, dim))
    step = 1e-2
    center = CASE.logdensity(CASE.mean)
    for i in range(dim):
        for j in range(dim):
            ei = np.zeros(dim)
            ej = np.zeros(dim)
            ei[i] = step * sd[i]
            ej[j] = step * sd[j]
            h[i, j] = (
                CASE.logdensity(CASE.mean + ei + ej)
                - CASE.logdensity(CASE.mean + ei)
                - CASE.logdensity(CASE.mean + ej)
                + center
            ) / (step * step)
    precision_scaled = -0.5 * (h + h.T)  # the precision of x / sd
    correlation = np.linalg.inv(precision_scaled)
    return correlation * np.outer(sd, sd)


def test_shrink_averages_variances_in_logs_where_the_window_is_narrower() -> None:
    previous = np.array([[1.0, 0.5], [0.5, 4.0]])
    window = np.array([[1e-6, 0.0], [0.0, 9.0]])
    shrunk = shrink(window, previous, 0.25)
    # Narrower: the geometric mean; wider: the arithmetic one.
    assert shrunk[0, 0] == pytest.approx(1e-6**0.25)
    assert shrunk[1, 1] == pytest.approx(0.25 * 9.0 + 0.75 * 4.0)
    # The correlation is the weights' mean of the two (0 and 0.25).
    r = shrunk[0, 1] / np.sqrt(shrunk[0, 0] * shrunk[1, 1])
    assert r == pytest.approx(0.75 * 0.25)
    # Linear shrinkage would have kept 0.75 of the unit: a variance 7.5e5 times too wide.
    assert shrunk[0, 0] < 0.04


@pytest.mark.parametrize("chain", range(4))
def test_scouting_learns_scales_five_orders_of_magnitude_apart(chain: int) -> None:
    sampler = SAMPLERS["kmc-lite"]
    params = sampler.make_params(CASE.dim, {}, warmup=WARMUP)
    start = np.random.default_rng(chain).uniform(-2.0, 2.0, CASE.dim)
    state = sampler.init(start, params, seed=1, chain=chain)
    while state.preconditioner is None:
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, CASE.logdensity(proposal.position))
    assert state.iteration == scouting_iterations(params)
    factor = state.preconditioner.factor
    truth = np.linalg.cholesky(_covariance())
    relative = np.linalg.solve(truth, factor)
    eigenvalues = np.linalg.eigvalsh(relative @ relative.T)
    # The map's covariance against the target's, along every direction: 0.39 to 1.49 in
    # these four chains. Before, with the variances shrunk linearly, 2e-8 to 170 (the
    # map's sd a seven-thousandth of the target's along one direction). 0.1 and 10
    # leave a factor of 4 and 7 of room around today's extremes.
    assert eigenvalues.min() > 0.1, eigenvalues
    assert eigenvalues.max() < 10, eigenvalues
