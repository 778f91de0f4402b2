"""Importance sampling over HTTP, on every store: the evidence in the diagnostics, the
weighted draws exported with their log weights, what is refused."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
MEAN = np.array([1.0, -2.0])
SD = np.array([0.5, 3.0])
#: log of the normalising constant of exp(-0.5 sum(((x - MEAN) / SD)^2)).
LOG_Z = math.log(2 * math.pi) + float(np.sum(np.log(SD)))


def _value(p: Json) -> Json:
    z = (np.asarray(p["x"]) - MEAN) / SD
    return {"id": p["id"], "log_density": -0.5 * float(z @ z)}


def _run(api: TestClient, **fields: Any) -> str:
    body = {
        "algorithm": "importance",
        "dim": 2,
        "chains": 8,
        "seed": 2,
        "warmup": 500,
        "max_iterations": 800,
        **fields,
    }
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()["proposals"]
    while proposals:
        answer = api.post(
            f"/v1/sessions/{sid}/step", json={"results": [_value(p) for p in proposals], "max": 8}
        )
        assert answer.status_code == 200, answer.text
        proposals = answer.json()["proposals"]
    return sid


def test_the_evidence_and_the_weighted_moments(client: TestClient) -> None:
    sid = _run(client)
    doc = client.get(f"/v1/sessions/{sid}/diagnostics").json()
    ev = doc["evidence"]
    # 8 x 300 draws; the evidence within 4 of its standard errors (about 0.01 here).
    assert ev["draws"] == 8 * 300
    assert abs(ev["log_evidence"] - LOG_Z) < 4 * ev["standard_error"], (ev, LOG_Z)
    assert ev["pareto_k"] < 0.5 and ev["ess"] > 1000, ev
    assert doc["warnings"] == []
    for p, mean, sd in zip(doc["parameters"], MEAN, SD, strict=True):
        assert p["r_hat"] is None and p["ess_bulk"] == p["ess_tail"] == ev["ess"]
        assert abs(p["mean"] - mean) < 4 * p["mcse_mean"], p
        assert abs(p["sd"] / sd - 1) < 0.1, p
    # Every post-warm-up draw carries its log weight; warm-up draws (am's) have none.
    page = client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    for chain in page["chains"]:
        weights = chain["sample_stats"]["log_weight"]
        assert all(w is None or math.isnan(w) for w in weights[:500])
        assert all(isinstance(w, float) and math.isfinite(w) for w in weights[500:])
    text = client.get(f"/v1/sessions/{sid}/draws", params={"format": "csv"}).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 8 * 300 and all(math.isfinite(float(r["log_weight__"])) for r in rows)


def test_the_weights_of_every_draw(client: TestClient, assert_problem: ProblemCheck) -> None:
    # GET .../weights: each post-warm-up draw's log weight against the mixture of the
    # chains' proposals, the weights the evidence is computed from: their log mean is the
    # diagnostics' log evidence (to rounding), and a Markov chain's are all 0.
    sid = _run(client)
    doc = client.get(f"/v1/sessions/{sid}/weights").json()
    assert doc["draws"] == 300 and doc["weighted"] is True
    assert [c["chain"] for c in doc["chains"]] == list(range(8))
    log_w = np.array([c["log_weights"] for c in doc["chains"]], dtype=float)
    assert log_w.shape == (8, 300) and np.all(np.isfinite(log_w))
    top = log_w.max()
    log_mean = top + math.log(float(np.mean(np.exp(log_w - top))))
    ev = client.get(f"/v1/sessions/{sid}/diagnostics").json()["evidence"]
    assert abs(log_mean - ev["log_evidence"]) < 1e-9
    own = client.get(f"/v1/sessions/{sid}/draws").json()["chains"][0]["sample_stats"]
    assert not np.allclose(own["log_weight"], log_w[0])  # the mixture's, not the chain's own
    chain = _run(client, algorithm="am", max_iterations=520)
    doc = client.get(f"/v1/sessions/{chain}/weights").json()
    assert doc["weighted"] is False and doc["draws"] == 20
    assert all(c["log_weights"] == [0.0] * 20 for c in doc["chains"])
    assert_problem(client.get("/v1/sessions/nosuchsession/weights"), 404)


def test_a_short_warm_up_warns(client: TestClient) -> None:
    # Five warm-up transitions: the proposals are am's first guesses; the weights say so.
    sid = _run(client, warmup=5, max_iterations=205, initial=[[8.0, 8.0]])
    codes = {w["code"] for w in client.get(f"/v1/sessions/{sid}/diagnostics").json()["warnings"]}
    assert codes & {"pareto_k", "importance_ess"}, codes


def test_a_stopping_rule_is_refused(client: TestClient, assert_problem: ProblemCheck) -> None:
    body = {"algorithm": "importance", "dim": 2, "stop": {"rhat": 1.01, "ess": 400}}
    problem = assert_problem(client.post("/v1/sessions", json=body), 422)
    assert problem["field"] == "stop" and "R-hat" in problem["detail"]
    sid = client.post("/v1/sessions", json={"algorithm": "importance", "dim": 2}).json()["id"]
    patch = client.patch(f"/v1/sessions/{sid}", json={"stop": {"rhat": 1.01, "ess": 400}})
    assert assert_problem(patch, 422)["field"] == "stop"
