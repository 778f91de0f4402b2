"""PATCH /v1/sessions/{id}: a later end or another stopping rule, on every store, and
with several service processes on one Redis."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from kameleon.service.config import Settings
from tests.service.conftest import MakeClient, ProblemCheck, StartClient

Json = dict[str, Any]


def _run(api: TestClient, sid: str, batch: int = 4) -> Json:
    """Answer a standard normal until the session hands out nothing more; the last answer."""
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": batch}).json()["proposals"]
    answer: Json = {}
    while proposals:
        results = [
            {"id": p["id"], "log_density": -0.5 * float(np.dot(p["x"], p["x"]))} for p in proposals
        ]
        answer = api.post(
            f"/v1/sessions/{sid}/step", json={"results": results, "max": batch}
        ).json()
        proposals = answer["proposals"]
    return answer


def _create(api: TestClient, **fields: Any) -> str:
    body = {"algorithm": "am", "dim": 2, "chains": 2, "seed": 7, "warmup": 10, **fields}
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _draws(api: TestClient, sid: str) -> np.ndarray:
    page = api.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    return np.array([c["draws"] for c in page["chains"]])


def test_a_done_session_goes_on_where_it_stopped(client: TestClient) -> None:
    sid = _create(client, max_iterations=30)
    _run(client, sid)
    before = _draws(client, sid)
    updated = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 60})
    assert updated.status_code == 200, updated.text
    summary = updated.json()
    assert (summary["max_iterations"], summary["status"], summary["stopped_by"]) == (
        60,
        "sampling",
        None,
    )
    assert summary["stop"] is None  # left out: unchanged
    _run(client, sid)
    after = client.get(f"/v1/sessions/{sid}").json()
    assert [c["iterations"] for c in after["chain_summaries"]] == [60, 60]
    assert (after["status"], after["stopped_by"]) == ("done", "max_iterations")
    draws = _draws(client, sid)
    assert draws.shape == (2, 60, 2)
    assert np.array_equal(draws[:, :30], before)  # the draws made are kept as they were


def test_an_extended_run_has_the_draws_of_one_long_run(client: TestClient) -> None:
    # Same seed and values: 30 then 30 more is bit for bit the run of 60 (the chains go
    # on from their states, adaptation included).
    long = _create(client, max_iterations=60)
    _run(client, long)
    split = _create(client, max_iterations=30)
    _run(client, split)
    assert client.patch(f"/v1/sessions/{split}", json={"max_iterations": 60}).status_code == 200
    _run(client, split)
    assert _draws(client, split).tobytes() == _draws(client, long).tobytes()


def test_a_tighter_rule_or_none(client: TestClient) -> None:
    sid = _create(client, max_iterations=None, stop={"rhat": 5.0, "ess": 1.0, "check_every": 100})
    _run(client, sid)
    stopped = client.get(f"/v1/sessions/{sid}").json()
    assert (stopped["status"], stopped["stopped_by"]) == ("done", "rule")
    first = stopped["chain_summaries"][0]["iterations"]
    rule = {"rhat": 1.5, "ess": 50.0, "check_every": 100}
    updated = client.patch(f"/v1/sessions/{sid}", json={"stop": rule}).json()
    assert updated["stop"] == rule and updated["max_iterations"] is None
    assert updated["status"] == "sampling"
    _run(client, sid)
    again = client.get(f"/v1/sessions/{sid}").json()
    assert again["stopped_by"] == "rule"
    assert again["chain_summaries"][0]["iterations"] > first


def test_bad_updates_are_refused_and_change_nothing(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = _create(client, max_iterations=30)
    _run(client, sid, batch=2)
    before = client.get(f"/v1/sessions/{sid}").json()
    shorter = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 20})
    assert assert_problem(shorter, 422)["errors"][0]["field"] == "max_iterations"
    typo = client.patch(f"/v1/sessions/{sid}", json={"max_iteration": 50})
    assert_problem(typo, 422)
    rule = client.patch(f"/v1/sessions/{sid}", json={"stop": {"rhat": 0.9}})
    assert_problem(rule, 422)
    assert_problem(client.patch("/v1/sessions/nope", json={"max_iterations": 50}), 404)
    assert client.get(f"/v1/sessions/{sid}").json() == before


def test_an_update_is_safe_to_retry(client: TestClient) -> None:
    sid = _create(client, max_iterations=30)
    _run(client, sid)
    first = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 40}).json()
    again = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 40}).json()
    assert again == first
    _run(client, sid)
    assert [
        c["iterations"] for c in client.get(f"/v1/sessions/{sid}").json()["chain_summaries"]
    ] == [40, 40]


def test_another_process_sees_the_update_before_it_decides(start_client: StartClient) -> None:
    # Two service processes on one Redis: b holds the session's old metadata (and
    # chains) in its caches when a updates it, and must not decide on them.
    a, b = start_client("redis"), start_client("redis")
    sid = _create(a, max_iterations=30)
    _run(b, sid)
    assert b.get(f"/v1/sessions/{sid}").json()["status"] == "done"
    assert a.patch(f"/v1/sessions/{sid}", json={"max_iterations": 50}).status_code == 200
    last = _run(b, sid)
    assert last["done"] is True
    summary = b.get(f"/v1/sessions/{sid}").json()
    assert summary["max_iterations"] == 50
    assert [c["iterations"] for c in summary["chain_summaries"]] == [50, 50]
    assert (summary["status"], summary["stopped_by"]) == ("done", "max_iterations")
    assert _draws(a, sid).shape == (2, 50, 2)


def test_a_running_session_keeps_its_leases_through_an_update(
    start_client: StartClient,
) -> None:
    a, b = start_client("redis"), start_client("redis")
    sid = _create(a, max_iterations=30)
    held = a.post(f"/v1/sessions/{sid}/ask", json={"max": 2, "lease_seconds": 60}).json()
    assert len(held["proposals"]) == 2
    assert b.patch(f"/v1/sessions/{sid}", json={"max_iterations": 40}).status_code == 200
    # Still leased: nothing to hand out until they are told.
    assert a.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()["proposals"] == []
    results = [{"id": p["id"], "log_density": -1.0} for p in held["proposals"]]
    told = a.post(f"/v1/sessions/{sid}/tell", json={"results": results}).json()
    assert [r["outcome"] for r in told["results"]] == ["initialized", "initialized"]


def test_an_update_past_the_quota_is_a_429_and_changes_nothing(
    make_client: MakeClient, assert_problem: ProblemCheck
) -> None:
    client = make_client(Settings(max_bytes_per_key=2_000_000))
    sid = _create(client, max_iterations=30)
    _run(client, sid)
    before = client.get(f"/v1/sessions/{sid}").json()
    refused = client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 1_000_000})
    problem = assert_problem(refused, 429)
    assert problem["limit"] == 2_000_000 and "max_bytes_per_key" in problem["detail"]
    assert client.get(f"/v1/sessions/{sid}").json() == before
    assert client.patch(f"/v1/sessions/{sid}", json={"max_iterations": 40}).status_code == 200
