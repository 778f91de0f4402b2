"""The evidence from Python: ``kameleon.sample(..., algorithm="importance")`` in process
and through a service gives ``Result.evidence`` and the weighted draws' log weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kameleon

MEAN = np.array([0.5, -1.0])
SD = np.array([1.0, 2.0])
LOG_Z = math.log(2 * math.pi) + float(np.sum(np.log(SD)))


def _logdensity(x: np.ndarray) -> float:
    z = (np.asarray(x) - MEAN) / SD
    return -0.5 * float(z @ z)


@pytest.mark.parametrize("where", ["in process", "service"])
def test_the_evidence_of_a_run(where: str, server: str) -> None:
    # 8 chains x 300 weighted draws after 500 warm-up: the log evidence within 4 of its
    # standard errors (about 0.01); the same draws in process and through the service.
    url = server if where == "service" else None
    result = kameleon.sample(
        _logdensity, dim=2, algorithm="importance", chains=8, warmup=500, iterations=300,
        seed=3, url=url, progress=False,
    )  # fmt: skip
    ev = result.evidence
    assert ev is not None and ev.draws == 8 * 300
    assert abs(ev.log_evidence - LOG_Z) < 4 * ev.standard_error, (ev, LOG_Z)
    assert ev.pareto_k < 0.5 and result.warnings == []
    weights = result.sample_stats["log_weight"]
    assert weights.shape == (8, 300) and np.all(np.isfinite(weights))
    assert "log evidence" in result.summary()
    local = kameleon.sample(
        _logdensity, dim=2, algorithm="importance", chains=8, warmup=500, iterations=300,
        seed=3, progress=False,
    )  # fmt: skip
    np.testing.assert_array_equal(result.draws, local.draws)
    assert result.evidence == local.evidence or where == "service"


@pytest.mark.filterwarnings("ignore::kameleon.SamplingWarning")  # a short run: not the point
def test_a_markov_chain_has_no_evidence() -> None:
    result = kameleon.sample(_logdensity, dim=2, iterations=200, warmup=100, seed=1, progress=False)
    assert result.evidence is None


@pytest.mark.slow  # 8 chains x 500 transitions of 4 evaluations each way
@pytest.mark.parametrize("where", ["in process", "service"])
def test_the_evidence_of_parallel_tempering(where: str, server: str) -> None:
    # The reference mode on the same Gaussian, 4 rungs: the log evidence within 3 of its
    # standard errors (about 0.03), and the summary says how it was computed.
    url = server if where == "service" else None
    result = kameleon.sample(
        _logdensity, dim=2, algorithm="tempering", chains=8, warmup=200, iterations=300,
        seed=3, url=url, progress=False, temperatures=4,
    )  # fmt: skip
    ev = result.evidence
    assert ev is not None and ev.draws == 8 * 300 and math.isnan(ev.pareto_k)
    assert abs(ev.log_evidence - LOG_Z) < 3 * ev.standard_error, (ev, LOG_Z)
    assert "stepping stones" in result.summary()
