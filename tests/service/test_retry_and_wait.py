"""Retry-safe ask and step (``request_id``) and long polls (``wait_seconds``), both stores.

PROTOCOL.md: "``wait_seconds`` (default 0) holds an ask that has nothing to hand out
until a proposal frees up or the wait ends (long poll); an empty answer carries the next
lease expiry as a hint. A retried ask with the same ``request_id`` within the lease gets
the same proposals back, so a lost answer strands nothing."

Timing bounds are loose (a shared machine): a woken long poll must answer well before
its wait ends, not within a tight latency.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]


@pytest.fixture
def new(module_client: TestClient) -> Any:
    made: list[str] = []

    def create(**fields: Any) -> str:
        body = {"algorithm": "rwm", "dim": 2, "chains": 3, "seed": 2, "warmup": 2, **fields}
        response = module_client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
        made.append(response.json()["id"])
        return str(response.json()["id"])

    yield create
    for sid in made:
        module_client.delete(f"/v1/sessions/{sid}")


def post(client: TestClient, sid: str, verb: str, body: Json) -> Json:
    response = client.post(f"/v1/sessions/{sid}/{verb}", json=body)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def told(proposals: list[Json]) -> list[Json]:
    return [{"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])} for p in proposals]


def test_a_retried_ask_gets_the_same_proposals(module_client: TestClient, new: Any) -> None:
    sid = new()
    first = post(module_client, sid, "ask", {"max": 2, "request_id": "w1-0001"})["proposals"]
    assert len(first) == 2
    again = post(module_client, sid, "ask", {"max": 2, "request_id": "w1-0001"})["proposals"]
    assert again == first  # same ids, points and lease expiries
    other = post(module_client, sid, "ask", {"max": 3, "request_id": "w2-0001"})["proposals"]
    assert {p["chain"] for p in other} == {0, 1, 2} - {p["chain"] for p in first}
    # A proposal told since is no longer handed out to the retry.
    post(module_client, sid, "tell", {"results": told(first[:1])})
    third = post(module_client, sid, "ask", {"max": 2, "request_id": "w1-0001"})["proposals"]
    assert third == first[1:]


def test_a_retried_step_answers_duplicate_and_the_same_proposals(
    module_client: TestClient, new: Any
) -> None:
    sid = new(chains=2)
    inits = post(module_client, sid, "ask", {"max": 2})["proposals"]
    body = {"results": told(inits), "max": 2, "request_id": "step-1"}
    first = post(module_client, sid, "step", body)
    again = post(module_client, sid, "step", body)
    assert [r["outcome"] for r in again["results"]] == ["duplicate", "duplicate"]
    assert again["proposals"] == first["proposals"] and len(first["proposals"]) == 2


def test_a_long_poll_ends_empty_with_the_next_expiry(module_client: TestClient, new: Any) -> None:
    sid = new(chains=1)
    (held,) = post(module_client, sid, "ask", {"lease_seconds": 30})["proposals"]
    started = time.monotonic()
    answer = post(module_client, sid, "ask", {"wait_seconds": 0.6})
    assert time.monotonic() - started >= 0.55
    assert answer["proposals"] == [] and answer["done"] is False
    expiry = datetime.fromisoformat(answer["next_lease_expires_at"])
    assert abs((expiry - datetime.fromisoformat(held["lease_expires_at"])).total_seconds()) < 1e-3
    # Without a wait, the hint is there at once.
    assert post(module_client, sid, "ask", {})["next_lease_expires_at"] is not None


def test_a_long_poll_gets_a_proposal_freed_by_a_tell(module_client: TestClient, new: Any) -> None:
    sid = new(chains=1)
    (init,) = post(module_client, sid, "ask", {})["proposals"]
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(post, module_client, sid, "ask", {"wait_seconds": 10})
        time.sleep(0.3)
        post(module_client, sid, "tell", {"results": told([init])})
        answer = waiting.result(timeout=15)
    assert time.monotonic() - started < 5  # woken by the tell, not by the end of the wait
    (proposal,) = answer["proposals"]
    assert proposal["chain"] == 0 and proposal["iteration"] == 1


def test_a_long_poll_gets_a_proposal_whose_lease_ran_out(
    module_client: TestClient, new: Any
) -> None:
    sid = new(chains=1)
    (held,) = post(module_client, sid, "ask", {"lease_seconds": 0.5})["proposals"]
    started = time.monotonic()
    (again,) = post(module_client, sid, "ask", {"wait_seconds": 10})["proposals"]
    assert 0.3 < time.monotonic() - started < 5
    assert (again["id"], again["x"]) == (held["id"], held["x"])


def test_a_finished_session_does_not_hold_a_long_poll(module_client: TestClient, new: Any) -> None:
    sid = new(chains=1, max_iterations=1, warmup=0)
    proposals = post(module_client, sid, "ask", {})["proposals"]
    while proposals:
        proposals = post(module_client, sid, "step", {"results": told(proposals)})["proposals"]
    started = time.monotonic()
    answer = post(module_client, sid, "ask", {"wait_seconds": 10})
    assert answer["done"] is True and time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"wait_seconds": 31}, "wait_seconds"),
        ({"wait_seconds": -1}, "wait_seconds"),
        ({"request_id": ""}, "request_id"),
        ({"request_id": "has space"}, "request_id"),
        ({"request_id": "x" * 129}, "request_id"),
    ],
)
def test_bad_waits_and_request_ids_are_refused(
    module_client: TestClient, new: Any, assert_problem: ProblemCheck, body: Json, field: str
) -> None:
    sid = new()
    for verb in ("ask", "step"):
        response = module_client.post(f"/v1/sessions/{sid}/{verb}", json=body)
        problem = assert_problem(response, 422)
        assert any(field in e["field"] for e in problem["errors"]), problem
