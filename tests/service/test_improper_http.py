"""An improper target never answers 5xx nor wedges a session, on both stores: a flat
target runs to ``max_iterations`` and its diagnostics say ``improper``; and a sampler
that raises anyway stops its session with a stated reason instead of answering 500."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.core import SAMPLERS
from kameleon.core.interface.metropolis import metropolis_tell
from kameleon.core.samplers import am

Json = dict[str, Any]


def run(
    client: TestClient, sid: str, value: Callable[[list[float]], float | None], chains: int
) -> Json:
    """Step every chain until the session is done (each answer a 200); the last answer."""
    answer: Json = client.post(f"/v1/sessions/{sid}/ask", json={"max": chains}).json()
    while not answer["done"]:
        results = [{"id": p["id"], "log_density": value(p["x"])} for p in answer["proposals"]]
        response = client.post(f"/v1/sessions/{sid}/step", json={"results": results, "max": chains})
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["proposals"] or answer["done"]
    return answer


@pytest.mark.slow
def test_a_flat_target_runs_to_max_iterations_and_says_improper(client: TestClient) -> None:
    # The default sampler and warm-up, where adaptation used to overflow (a 500, then a
    # session whose every ask answered 500).
    body = {"algorithm": "am", "dim": 2, "chains": 2, "seed": 4, "max_iterations": 1100}
    created = client.post("/v1/sessions", json=body)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert created.json()["warmup"] == 1000
    run(client, sid, lambda x: 0.0, 2)
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["status"] == "done" and summary["stopped_by"] == "max_iterations"
    assert [c["iterations"] for c in summary["chain_summaries"]] == [1100, 1100]
    diagnostics = client.get(f"/v1/sessions/{sid}/diagnostics")
    assert diagnostics.status_code == 200, diagnostics.text
    warnings = diagnostics.json()["warnings"]
    assert [w["code"] for w in warnings] == ["improper"]
    assert "improper (not normalisable)" in warnings[0]["message"]
    draws = client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    assert all(np.all(np.isfinite(c["draws"])) for c in draws["chains"])


def test_a_sampler_that_raises_stops_its_session_with_a_stated_reason(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"algorithm": "am", "dim": 2, "chains": 2, "seed": 4, "warmup": 10}
    sid = client.post("/v1/sessions", json=body).json()["id"]
    propose = am._propose  # what am.ask calls: a failure inside the sampler's ask

    def failing(state: Any, params: Any, rng: Any) -> Any:
        if state.iteration >= 5:
            raise np.linalg.LinAlgError("the matrix is not finite")
        return propose(state, params, rng)

    monkeypatch.setattr(am, "_propose", failing)
    answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()
    failed = None
    for _ in range(20):
        results = [{"id": p["id"], "log_density": 0.0} for p in answer["proposals"]]
        response = client.post(f"/v1/sessions/{sid}/step", json={"results": results, "max": 2})
        assert response.status_code < 500, response.text
        if response.status_code != 200:
            failed = response
            break
        answer = response.json()
    assert failed is not None and failed.status_code == 422
    problem = failed.json()
    assert problem["type"].endswith("/sampler-failed")
    assert problem["chain"] in (0, 1)
    assert "LinAlgError" in problem["detail"] and "sampler_error" in problem["detail"]
    # The session is stopped, with its reason: every later request answers, none 500.
    for _ in range(3):
        again = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2})
        assert again.status_code == 200, again.text
        assert again.json()["done"] and again.json()["proposals"] == []
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["status"] == "done" and summary["stopped_by"] == "sampler_error"
    # A retry of the request that met the failure: its results were applied once.
    retried = client.post(f"/v1/sessions/{sid}/tell", json={"results": results})
    assert retried.status_code == 200, retried.text
    assert {r["outcome"] for r in retried.json()["results"]} == {"duplicate"}
    assert client.get(f"/v1/sessions/{sid}/diagnostics").status_code == 200


def test_a_tell_the_sampler_fails_on_applies_nothing_and_stops_the_session(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # am's record, with an adaptation that fails once armed (after the initial point).
    armed = [False]
    adapt = am.SAMPLER.metropolis_adapt
    assert adapt is not None

    def failing(*args: Any) -> Any:
        if armed[0]:
            raise FloatingPointError("overflow")
        return adapt(*args)

    def tell(*args: Any) -> Any:
        return metropolis_tell(*args, failing)

    record = dataclasses.replace(am.SAMPLER, tell=tell, metropolis_adapt=failing)
    monkeypatch.setitem(SAMPLERS, "am", record)
    body = {"algorithm": "am", "dim": 2, "chains": 1, "seed": 4, "warmup": 10}
    sid = client.post("/v1/sessions", json=body).json()["id"]
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    first = client.post(
        f"/v1/sessions/{sid}/step", json={"results": [{"id": init["id"], "log_density": 0.0}]}
    ).json()["proposals"]
    armed[0] = True
    told = {"results": [{"id": first[0]["id"], "log_density": 0.0}]}
    response = client.post(f"/v1/sessions/{sid}/tell", json=told)
    assert response.status_code == 422, response.text
    assert "nothing in this request was applied" in response.json()["detail"]
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["stopped_by"] == "sampler_error" and summary["iterations"] == 0
    answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1})
    assert answer.status_code == 200 and answer.json()["done"]
    # It cannot be made to go on: an update is refused and changes nothing.
    update = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 5000})
    assert update.status_code == 409 and "sampler_error" in update.json()["detail"]
    assert client.get(f"/v1/sessions/{sid}").json() == summary
