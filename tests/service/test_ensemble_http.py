"""The ensemble sampler over HTTP, on every store: its walkers handed out one at a time
in emcee's order, emcee's autocorrelation time in the diagnostics, the short-run
warning, and a bad option refused."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
WALKERS = 8
#: A correlated Gaussian (rho 0.9) of scales 1 and 10.
PRECISION = np.linalg.inv(np.array([[1.0, 9.0], [9.0, 100.0]]))


def _value(p: Json) -> Json:
    x = np.asarray(p["x"])
    return {"id": p["id"], "log_density": -0.5 * float(x @ PRECISION @ x)}


def _run(api: TestClient, **fields: Any) -> str:
    body = {
        "algorithm": "ensemble",
        "dim": 2,
        "chains": 2,
        "seed": 4,
        "options": {"walkers": WALKERS},
        **fields,
    }
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()["proposals"]
    while proposals:
        # A chain's walkers come a half-step at a time (a round: PROTOCOL.md), in order.
        for chain in {p["chain"] for p in proposals}:
            mine = [p["iteration"] for p in proposals if p["chain"] == chain]
            assert mine == list(range(mine[0], mine[0] + len(mine)))
            if mine[0] >= WALKERS:  # moves, not the placements: within one half-step
                assert len({t // (WALKERS // 2) for t in mine}) == 1
        answer = api.post(
            f"/v1/sessions/{sid}/step", json={"results": [_value(p) for p in proposals], "max": 8}
        )
        assert answer.status_code == 200, answer.text
        proposals = answer.json()["proposals"]
    return sid


def test_autocorrelation_time_and_the_short_run_warning(client: TestClient) -> None:
    # 100 warm-up sweeps, then 40: tau is several sweeps here (about 10 to 30), so
    # 40 sweeps are far under 50 of them.
    sid = _run(client, warmup=WALKERS * 100, max_iterations=WALKERS * 140)
    doc = client.get(f"/v1/sessions/{sid}/diagnostics").json()
    assert doc["draws"] == WALKERS * 40
    times = [p["autocorrelation_time"] for p in doc["parameters"]]
    assert all(isinstance(t, float) and t > 1 for t in times), times
    short = [w for w in doc["warnings"] if w["code"] == "short_run"]
    assert {w["parameter"] for w in short} == {"x0", "x1"}, doc["warnings"]
    for w in short:
        assert w["threshold"] == 50 and w["value"] < 50
        assert "autocorrelation times" in w["message"]
    # The draws interleave the walkers: iteration t is walker t mod W.
    page = client.get(f"/v1/sessions/{sid}/draws", params={"chain": 0}).json()
    (chain,) = page["chains"]
    assert chain["iterations"][0] == WALKERS * 100 + 1


def test_other_algorithms_have_no_autocorrelation_time(client: TestClient) -> None:
    response = client.post(
        "/v1/sessions",
        json={"algorithm": "rwm", "dim": 2, "chains": 2, "seed": 1, "warmup": 2},
    )
    sid = response.json()["id"]
    proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()["proposals"]
    for _ in range(10):
        proposals = client.post(
            f"/v1/sessions/{sid}/step", json={"results": [_value(p) for p in proposals]}
        ).json()["proposals"]
    doc = client.get(f"/v1/sessions/{sid}/diagnostics").json()
    assert all(p["autocorrelation_time"] is None for p in doc["parameters"])


def test_an_odd_number_of_walkers_is_a_422_naming_it(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    body = {"algorithm": "ensemble", "dim": 2, "options": {"walkers": 7}}
    problem = assert_problem(client.post("/v1/sessions", json=body), 422)
    assert any("walkers" in e["field"] for e in problem["errors"]), problem


def test_the_trace_reads_each_walker_as_the_diagnostics_do(client: TestClient) -> None:
    """The trace's running R-hat and bulk ESS of an ensemble are its diagnostics' at the
    last checkpoint (each walker's whole sweeps as a chain; kept draws not thinned here,
    299 sweeps under 10 000 points), and every checkpoint ends a sweep."""
    sid = _run(client, warmup=WALKERS * 50, max_iterations=WALKERS * 350 + 3)
    doc = client.get(f"/v1/sessions/{sid}/diagnostics").json()
    trace = client.get(f"/v1/sessions/{sid}/trace", params={"points": 10_000}).json()
    running = trace["running"]
    # Sweeps begin at walker 0 (iterations 408, 416, ...): 299 whole ones by 2803.
    assert running["iterations"][-1] == WALKERS * 51 + 299 * WALKERS - 1
    assert all((i + 1) % WALKERS == 0 for i in running["iterations"]), running["iterations"]
    for k, parameter in enumerate(doc["parameters"]):
        assert abs(running["r_hat"][-1][k] - parameter["r_hat"]) < 1e-9
        assert abs(running["ess_bulk"][-1][k] / parameter["ess_bulk"] - 1) < 1e-9
