"""Quotas keep their word under concurrency and for open-ended sessions, and creates
and deletes are safe to retry (PROTOCOL.md, "Errors" and "Guarantees"), on both stores."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from kameleon.service.config import Settings
from kameleon.service.sessions import budget
from tests.service.conftest import MakeClient, ProblemCheck


def _create(client: TestClient, body: dict[str, object], key: str | None = None) -> int:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post("/v1/sessions", json=body, headers=headers).status_code


def test_concurrent_creates_never_pass_the_quota(make_client: MakeClient) -> None:
    """Sixty creates at once against a limit of twenty sessions: exactly twenty are
    made, the others answer 429, and the listing holds twenty. (Checked, then spent, the
    quota let sixty through on Redis.) The same for memory: 8 sessions of 1.2 MB each
    fit in 10 MB, not 9."""
    client = make_client(Settings(max_sessions_per_key=20))
    body = {"algorithm": "rwm", "dim": 2, "chains": 1, "max_iterations": 10}
    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda _: _create(client, body), range(60)))
    assert sorted(set(codes)) == [201, 429] and codes.count(201) == 20
    assert len(client.get("/v1/sessions?limit=100").json()["sessions"]) == 20

    am = {"algorithm": "am", "dim": 100, "chains": 1, "max_iterations": 10}
    size = budget.session_bytes("am", 100, 1, _params("am", 100), 10)
    roomy = make_client(Settings(max_bytes_per_key=int(8.5 * size)))
    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda _: _create(roomy, am), range(24)))
    assert codes.count(201) == 8 and codes.count(429) == 16


def _params(algorithm: str, dim: int) -> object:
    from kameleon.core import SAMPLERS

    return SAMPLERS[algorithm].make_params(dim, {}, warmup=1000)


def test_a_cap_across_keys_is_kept(make_client: MakeClient, assert_problem: ProblemCheck) -> None:
    """``max_bytes_total`` bounds every key's sessions together: a second key is refused
    once the first used the service's whole budget, with a message that says so."""
    body = {"algorithm": "am", "dim": 100, "chains": 1, "max_iterations": 10}
    size = budget.session_bytes("am", 100, 1, _params("am", 100), 10)
    client = make_client(Settings(max_bytes_total=int(2.5 * size), api_key_hashes=_HASHES))
    one, two = {"X-API-Key": "one"}, {"X-API-Key": "two"}
    assert client.post("/v1/sessions", json=body, headers=one).status_code == 201
    assert client.post("/v1/sessions", json=body, headers=one).status_code == 201
    problem = assert_problem(client.post("/v1/sessions", json=body, headers=two), 429)
    assert "max_bytes_total" in problem["detail"] and problem["limit"] == int(2.5 * size)
    first = client.get("/v1/sessions", headers=one).json()["sessions"][0]["id"]
    assert client.delete(f"/v1/sessions/{first}", headers=one).status_code == 204
    assert client.post("/v1/sessions", json=body, headers=two).status_code == 201


_HASHES = [
    "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed",  # sha256("one")
    "3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3",  # sha256("two")
]


def test_an_open_ended_session_pays_for_its_draws(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session without max_iterations reserves its draws a step at a time; when the
    key's quota cannot pay for the next step, the session stops (``stopped_by:
    "quota"``) rather than grow unseen. Here a step is 154 iterations (64 KiB of
    50-dimensional rows) and the quota pays for two."""
    monkeypatch.setattr(budget, "GROW_BYTES", 64 * 1024)
    state = budget.session_bytes("rwm", 50, 1, _params("rwm", 50), 0)
    step = budget.grant_step(50, 1)
    assert step == 154
    rows = budget.iteration_bytes(50, 1)
    client = make_client(Settings(max_bytes_per_key=state + int(2.5 * step * rows)))
    sid = client.post(
        "/v1/sessions",
        json={"algorithm": "rwm", "dim": 50, "chains": 1, "seed": 1, "max_iterations": None},
    ).json()["id"]
    answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()
    for _ in range(600):
        if answer["done"]:
            break
        results = [
            {"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])}
            for p in answer["proposals"]
        ]
        answer = client.post(f"/v1/sessions/{sid}/step", json={"results": results}).json()
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert answer["done"] and summary["status"] == "done"
    assert summary["stopped_by"] == "quota"
    # It stopped once its chain came within a quarter step of the two steps paid for.
    assert 2 * step - step // 4 - 2 <= summary["iterations"] <= 2 * step


def test_a_create_with_an_idempotency_key_is_safe_to_retry(
    make_client: MakeClient, assert_problem: ProblemCheck
) -> None:
    client = make_client(Settings(max_sessions_per_key=2))
    body = {"algorithm": "rwm", "dim": 2}
    headers = {"Idempotency-Key": "create-1"}
    first = client.post("/v1/sessions", json=body, headers=headers)
    again = client.post("/v1/sessions", json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["seed"] == again.json()["seed"]  # the first's, drawn once
    assert len(client.get("/v1/sessions").json()["sessions"]) == 1
    assert _create(client, body, "create-2") == 201
    assert _create(client, body, "create-2") == 201  # a retry takes no more quota
    assert_problem(client.post("/v1/sessions", json=body, headers={"Idempotency-Key": "3"}), 429)
    bad = client.post("/v1/sessions", json=body, headers={"Idempotency-Key": "has space"})
    assert_problem(bad, 422)
    # Once the session is deleted, the key makes a new one.
    assert client.delete(f"/v1/sessions/{first.json()['id']}").status_code == 204
    fresh = client.post("/v1/sessions", json=body, headers=headers)
    assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]


def test_a_delete_is_safe_to_retry(make_client: MakeClient, assert_problem: ProblemCheck) -> None:
    client = make_client(Settings(api_key_hashes=_HASHES))
    one, two = {"X-API-Key": "one"}, {"X-API-Key": "two"}
    sid = client.post("/v1/sessions", json={"dim": 2}, headers=one).json()["id"]
    assert_problem(client.delete(f"/v1/sessions/{sid}", headers=two), 404)
    assert client.delete(f"/v1/sessions/{sid}", headers=one).status_code == 204
    assert client.delete(f"/v1/sessions/{sid}", headers=one).status_code == 204
    assert_problem(client.delete(f"/v1/sessions/{sid}", headers=two), 404)
    assert_problem(client.get(f"/v1/sessions/{sid}", headers=one), 404)
