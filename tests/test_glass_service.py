"""The Glass GP classification, pseudo-marginal, end to end through a service.

``examples/glass_gpc.py``'s importance-sampling estimate of ``p(y | theta)`` on the full
Glass data (50 importance samples), told to a ``kameleon serve`` process (memory store)
by two workers, at a size CI affords: 2 chains x (100 + 150) iterations, 502 evaluations
of a few milliseconds, about 8 s per sampler.

To compare the service's run with the in-process run bit for bit, the estimate's
importance samples are seeded by the point (:class:`Replayable`): the same point gets
the same estimate in whatever order, thread or process it is evaluated. That is still
a noisy estimate of the likelihood (each point's noise is fixed, not fresh), which is
all the comparison needs; the estimator's unbiasedness is tested in
``tests/test_examples.py``.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import kameleon
from tests.sdk.conftest import clean_env
from tests.servers import KAMELEON, free_port, serving

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from glass_gpc import PRIOR_VARIANCE, GlassGPC  # noqa: E402

pytestmark = pytest.mark.slow

CHAINS, WARMUP, ITERATIONS, SEED = 2, 100, 150, 5
# Distinct starting points, so that no point is evaluated twice unless a sampler asks
# for the current point's value again (which a pseudo-marginal session must not).
INITIAL = np.array([np.zeros(9), np.full(9, 0.5)])


class Replayable:
    """The log of ``GlassGPC``'s unbiased estimate of ``p(y | theta)`` plus the log
    prior, with the importance samples seeded by ``theta``'s bytes; every evaluation is
    recorded (thread-safe)."""

    def __init__(self) -> None:
        self.gpc = GlassGPC(samples=50)
        self.told: list[tuple[bytes, float]] = []
        self._lock = threading.Lock()

    def __call__(self, theta: np.ndarray) -> float:
        theta = np.asarray(theta, dtype=np.float64)
        digest = hashlib.blake2b(theta.tobytes(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        value = self.gpc.log_marginal_estimate(theta, rng) - 0.5 * float(theta @ theta) / (
            PRIOR_VARIANCE
        )
        with self._lock:
            self.told.append((theta.tobytes(), value))
        return value


def _run(target: Replayable, url: str | None, algorithm: str) -> kameleon.Result:
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)  # a short run: it warns
        return kameleon.sample(
            target,
            dim=9,
            algorithm=algorithm,
            chains=CHAINS,
            iterations=ITERATIONS,
            warmup=WARMUP,
            url=url,
            workers=2,
            seed=SEED,
            progress=False,
            pseudo_marginal=True,
            initial=INITIAL,
        )


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    with serving([KAMELEON, "serve", "--port", str(port)], clean_env(), port) as url:
        yield url


@pytest.mark.parametrize("algorithm", ["kmc-lite", "kameleon"])
def test_the_glass_posterior_through_the_service(server: str, algorithm: str) -> None:
    served_target, local_target = Replayable(), Replayable()
    served = _run(served_target, server, algorithm)
    local = _run(local_target, None, algorithm)

    # The service's run is the in-process run, bit for bit.
    assert served.draws.shape == (CHAINS, ITERATIONS, 9)
    assert np.all(np.isfinite(served.draws)) and np.all(np.isfinite(served.log_density))
    assert served.draws.tobytes() == local.draws.tobytes()
    assert served.log_density.tobytes() == local.log_density.tobytes()
    np.testing.assert_array_equal(served.acceptance, local.acceptance)

    # Every evaluation was told, once: one per iteration and one per starting point.
    expected = CHAINS * (WARMUP + ITERATIONS + 1)
    assert len(served_target.told) == expected
    assert served.session is not None
    with kameleon.Client(server) as client:
        session = client.get_session(served.session)
    assert session.pseudo_marginal
    assert session.evaluations == expected

    # Pseudo-marginal: the current point's estimate is kept, never asked for again. No
    # point was evaluated twice, and every draw carries the value told at that point
    # (a rejection repeats the kept value, not a fresh estimate).
    told = dict(served_target.told)
    assert len(told) == expected
    for chain in range(CHAINS):
        for x, lp in zip(served.draws[chain], served.log_density[chain], strict=True):
            assert told[x.tobytes()] == lp
    assert served.accepted is not None and not served.accepted.all()

    # The chains climbed from their starts (log densities about -91 and -79) into the
    # posterior's bulk (about -64 at its mean, a few units lower on average over it) and
    # neither stuck nor walked blind.
    assert np.all(served.log_density[:, -50:].mean(axis=1) > -75)
    assert np.all((served.acceptance > 0.05) & (served.acceptance < 0.95))
