"""POST /v1/consensus on every store: shard sessions told in parts with prior_power 1/J,
combined into the full posterior; the answer is core.populations.consensus's on the sessions' own
draws; what is refused; the warnings of a non-Gaussian shard."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.core.populations.consensus import combine
from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
J = 3
PRIOR_SD = 10.0
#: Each shard's data: y ~ N(theta, I) in 2-d, 20 points per shard.
DATA = np.random.default_rng(8).normal([1.0, -0.5], 1.0, size=(J, 20, 2))


def _tell(p: Json, shard: int) -> Json:
    x = np.asarray(p["x"])
    r = DATA[shard] - x
    return {
        "id": p["id"],
        "log_prior": -0.5 * float(x @ x) / PRIOR_SD**2,
        "log_likelihood": -0.5 * float((r * r).sum()),
    }


def _run(api: TestClient, body: Json, tell: Any) -> str:
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()["proposals"]
    while proposals:
        answer = api.post(
            f"/v1/sessions/{sid}/step", json={"results": [tell(p) for p in proposals], "max": 8}
        )
        assert answer.status_code == 200, answer.text
        proposals = answer.json()["proposals"]
    return sid


def _shard(api: TestClient, shard: int, seed: int) -> str:
    body = {
        "algorithm": "am",
        "dim": 2,
        "chains": 8,
        "seed": seed,
        "warmup": 150,
        "max_iterations": 500,
        "prior_power": 1 / J,
        "param_names": ["a", "b"],
    }
    return _run(api, body, lambda p: _tell(p, shard))


def _draws(api: TestClient, sid: str) -> np.ndarray:
    page = api.get(f"/v1/sessions/{sid}/draws", params={"page_size": 100_000}).json()
    assert page["next"] is None
    return np.concatenate([np.asarray(c["draws"]) for c in page["chains"]])


@pytest.fixture(scope="module")
def shards(module_client: TestClient) -> list[str]:
    return [_shard(module_client, j, seed=20 + j) for j in range(J)]


def test_the_consensus_of_shards_is_the_full_posterior(
    module_client: TestClient, shards: list[str]
) -> None:
    api = module_client
    answer = api.post("/v1/consensus", json={"sessions": shards})
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    # The answer is core.populations.consensus's weighted average of the sessions' own draws.
    own = [_draws(api, sid) for sid in shards]
    expected = combine(own, "weighted")
    np.testing.assert_array_equal(np.asarray(doc["draws"]), expected.draws)
    np.testing.assert_array_equal(np.asarray(doc["mean"]), expected.mean)
    assert doc["param_names"] == ["a", "b"]
    assert [s["id"] for s in doc["shards"]] == shards
    assert [s["draws"] for s in doc["shards"]] == [8 * 350] * J
    assert all(s["prior_power"] == pytest.approx(1 / J) for s in doc["shards"])
    # The full posterior is Gaussian: precision 1/10^2 + 60 per coordinate, mean the
    # data's sum over it. Tolerance: each shard has 8 x 350 draws of AM, an ESS of
    # several hundred; the consensus mean's Monte Carlo error is then about 0.05 of the
    # posterior sd, and 0.25 sd leaves five of them; the sd within 15 %.
    precision = 1 / PRIOR_SD**2 + DATA.shape[0] * DATA.shape[1]
    mean, sd = DATA.sum(axis=(0, 1)) / precision, 1 / np.sqrt(precision)
    assert np.all(np.abs(np.asarray(doc["mean"]) - mean) < 0.25 * sd), (doc["mean"], mean)
    assert np.allclose(doc["sd"], sd, rtol=0.15), (doc["sd"], sd)
    assert not [w for w in doc["warnings"] if w["code"] == "non_gaussian"]


def test_the_gaussian_rule_draws_as_many_as_asked_from_its_seed(
    module_client: TestClient, shards: list[str]
) -> None:
    api = module_client
    body = {"sessions": shards, "method": "gaussian", "draws": 500, "seed": 3}
    a, b = api.post("/v1/consensus", json=body).json(), api.post("/v1/consensus", json=body).json()
    assert len(a["draws"]) == 500 and a["draws"] == b["draws"]
    own = [_draws(api, sid) for sid in shards]
    np.testing.assert_allclose(a["mean"], combine(own, "gaussian", n=500, seed=3).mean)
    other = api.post("/v1/consensus", json={**body, "seed": 4}).json()
    assert other["draws"] != a["draws"] and other["mean"] == a["mean"]
    fewer = api.post("/v1/consensus", json={"sessions": shards, "draws": 100}).json()
    assert len(fewer["draws"]) == 100


def _field(assert_problem: ProblemCheck, response: Any, status: int) -> list[str]:
    body = assert_problem(response, status)
    return [e["field"] for e in body.get("errors") or []]


def test_shards_that_cannot_be_combined_are_refused(
    module_client: TestClient, shards: list[str], assert_problem: ProblemCheck
) -> None:
    api = module_client
    post = lambda body: api.post("/v1/consensus", json=body)  # noqa: E731
    assert "sessions" in _field(assert_problem, post({"sessions": shards[:1]}), 422)
    repeated = post({"sessions": [shards[0], shards[1], shards[0]]})
    assert "sessions.2" in _field(assert_problem, repeated, 422)
    assert_problem(post({"sessions": [shards[0], "0" * 24]}), 404)
    assert "method" in _field(assert_problem, post({"sessions": shards, "method": "mean"}), 422)
    other = api.post("/v1/sessions", json={"algorithm": "am", "dim": 3, "seed": 1}).json()["id"]
    assert "sessions.1" in _field(assert_problem, post({"sessions": [shards[0], other]}), 422)
    fresh = api.post("/v1/sessions", json={"algorithm": "am", "dim": 2, "seed": 1}).json()["id"]
    named = api.post(
        "/v1/sessions",
        json={"algorithm": "am", "dim": 2, "seed": 1, "param_names": ["a", "b"]},
    ).json()["id"]
    assert "sessions.1" in _field(assert_problem, post({"sessions": [shards[0], fresh]}), 422)
    refused = post({"sessions": [shards[0], named]})  # no draws yet
    assert "sessions" in _field(assert_problem, refused, 422)
    assert "dim + 2" in refused.json()["detail"]
    for sid in (other, fresh, named):
        api.delete(f"/v1/sessions/{sid}")


def test_a_skewed_shard_is_named_in_the_warnings(
    module_client: TestClient, shards: list[str]
) -> None:
    # A shard whose subposterior is a Gamma(2) in its first coordinate (skewness 1.4).
    def gamma(p: Json) -> Json:
        a, b = p["x"]
        value = np.log(a) - a - 0.5 * b * b if a > 0 else -np.inf
        return {"id": p["id"], "log_density": value if np.isfinite(value) else "-inf"}

    body = {
        "algorithm": "am",
        "dim": 2,
        "chains": 8,
        "seed": 4,
        "warmup": 150,
        "max_iterations": 500,
        "initial": [1.0, 0.0],
        "initial_radius": 0.5,
        "param_names": ["a", "b"],
    }
    skewed = _run(module_client, body, gamma)
    doc = module_client.post("/v1/consensus", json={"sessions": [*shards[:2], skewed]}).json()
    named = [w for w in doc["warnings"] if w["code"] == "non_gaussian"]
    assert [(w["session"], w["parameter"]) for w in named] == [(skewed, "a")]
    assert "not Gaussian" in named[0]["message"]
    module_client.delete(f"/v1/sessions/{skewed}")
