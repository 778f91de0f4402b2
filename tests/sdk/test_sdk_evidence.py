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


def _bimodal(x: np.ndarray) -> float:
    # 0.3 N((-4, 0), I) + 0.7 N((4, 0), I): modes far apart, so that chains land on one
    # each and only the mixture weights give each mode its mass.
    x = np.asarray(x)
    a = math.log(0.3) - 0.5 * float((x[0] + 4) ** 2 + x[1] ** 2)
    b = math.log(0.7) - 0.5 * float((x[0] - 4) ** 2 + x[1] ** 2)
    return float(np.logaddexp(a, b))


@pytest.mark.parametrize("where", ["in process", "service"])
def test_equally_weighted_draws_on_request(where: str, server: str) -> None:
    # 16 chains of importance sampling on a two-mode target. Their weights against the
    # mixture of the chains' proposals (`Result.log_weights`, `GET .../weights`) give each
    # mode its mass, 0.3 and 0.7; resampling them gives equally weighted draws with the
    # target's moments. Tolerances: 16 x 400 draws, the weights' ESS in the thousands, so
    # the mass of a mode is within 0.05 (5 sd of a binomial share) and the mean of x1
    # (truth 1.6) within 0.3.
    url = server if where == "service" else None
    result = kameleon.sample(
        _bimodal, dim=2, algorithm="importance", chains=16, warmup=600, iterations=400,
        seed=5, url=url, progress=False,
        initial=np.column_stack([np.linspace(-8, 8, 16), np.zeros(16)]),
    )  # fmt: skip
    assert result.log_weights is not None and result.log_weights.shape == (16, 400)
    w = result.weights
    assert w.shape == (16, 400) and abs(float(w.sum()) - 1.0) < 1e-12
    right = float(w[result.draws[..., 0] > 0].sum())
    assert abs(right - 0.7) < 0.05, right
    equal = result.resample(4000, seed=1)
    assert equal.shape == (4000, 2)
    assert abs(float(np.mean(equal[:, 0] > 0)) - 0.7) < 0.05
    assert abs(float(equal[:, 0].mean()) - 1.6) < 0.3
    np.testing.assert_array_equal(equal, result.resample(4000, seed=1))  # the same seed
    assert len(result.resample()) == round(1.0 / float(np.sum(w * w)))  # default: the ESS
    if url is not None:
        with kameleon.Client(url) as client:
            np.testing.assert_array_equal(client.weights(result.session), result.log_weights)


@pytest.mark.filterwarnings("ignore::kameleon.SamplingWarning")  # a short run: not the point
def test_a_markov_chains_draws_weigh_the_same(server: str) -> None:
    result = kameleon.sample(
        _logdensity, dim=2, iterations=100, warmup=50, seed=1, url=server, progress=False
    )
    assert result.log_weights is None
    np.testing.assert_array_equal(result.weights, np.full((4, 100), 1 / 400))
    np.testing.assert_array_equal(result.resample(), result.draws.reshape(-1, 2))
    with kameleon.Client(server) as client:
        np.testing.assert_array_equal(client.weights(result.session), np.zeros((4, 100)))


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


def _prior_and_likelihood(x: np.ndarray) -> tuple[float, float]:
    # A N(0, 2^2 I) prior, normalised, and the Gaussian log density above as the
    # likelihood: the evidence is the integral of their product,
    # N(MEAN; 0, 4 I + diag(SD^2)) times the likelihood's normaliser exp(LOG_Z).
    x = np.asarray(x)
    log_prior = -0.5 * float(x @ x) / 4.0 - math.log(2 * math.pi * 4.0)
    return log_prior, _logdensity(x)


def test_likelihood_tempering_through_a_service_tells_the_parts(server: str) -> None:
    # With tempered="likelihood" the function returns (log prior, log likelihood), in
    # process and through a service alike: the same draws, the same evidence.
    var = 4.0 + SD**2
    log_z = (
        LOG_Z - 0.5 * float(np.sum(MEAN**2 / var)) - 0.5 * float(np.sum(np.log(2 * np.pi * var)))
    )
    runs = {}
    for where, url in (("in process", None), ("service", server)):
        runs[where] = kameleon.sample(
            _prior_and_likelihood, dim=2, algorithm="tempering", chains=4, warmup=100,
            iterations=150, seed=3, url=url, progress=False, temperatures=4,
            tempered="likelihood",
        )  # fmt: skip
    local, served = runs["in process"], runs["service"]
    np.testing.assert_array_equal(served.draws, local.draws)
    assert served.evidence is not None and local.evidence is not None
    assert served.evidence.log_evidence == pytest.approx(local.evidence.log_evidence, abs=1e-9)
    # A loose check that the parts were used as parts: within 0.5 of the exact log
    # evidence (4 chains of 150 draws; the tests of core/samplers/tempering.py hold the
    # calibrated tolerance).
    assert abs(served.evidence.log_evidence - log_z) < 0.5, (served.evidence, log_z)
    with pytest.raises(ValueError, match="pair"):
        kameleon.sample(
            _logdensity, dim=2, algorithm="tempering", chains=2, warmup=10, iterations=10,
            seed=3, url=server, progress=False, tempered="likelihood",
        )  # fmt: skip
