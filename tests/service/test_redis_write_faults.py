"""Creates and deletes against a stalled Redis (a throwaway server, paused with SIGSTOP):
the 503 says the service could not confirm the write, and the retry PROTOCOL.md
prescribes ends with exactly what one successful call would have done."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from kameleon.service.config import Settings
from tests.service.test_redis_faults import Server, client_of, private_server

pytestmark = pytest.mark.slow

TIMEOUT = 1.0


@pytest.fixture
def server() -> Iterator[Server]:
    with private_server() as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[TestClient]:
    with client_of(server, Settings(max_sessions_per_key=2), TIMEOUT) as c:
        yield c


def _paused(server: Server, call: object) -> int:
    server.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        status: int = call()  # type: ignore[operator]
        assert time.monotonic() - started < TIMEOUT + 1.5
    finally:
        server.signal(signal.SIGCONT)
    time.sleep(0.3)  # Redis runs the queued scripts now, past their deadline
    return status


def test_a_create_retried_after_a_503_makes_one_session(client: TestClient, server: Server) -> None:
    body = {"algorithm": "rwm", "dim": 2, "seed": 4}
    keyed = {"Idempotency-Key": "stalled-create"}
    status = _paused(
        server, lambda: client.post("/v1/sessions", json=body, headers=keyed).status_code
    )
    assert status == 503
    assert client.get("/v1/sessions").json()["sessions"] == []  # it changed nothing
    first = client.post("/v1/sessions", json=body, headers=keyed)
    again = client.post("/v1/sessions", json=body, headers=keyed)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    # One session, one share of the quota (2 per key): one more fits, then 429.
    assert len(client.get("/v1/sessions").json()["sessions"]) == 1
    assert client.post("/v1/sessions", json=body).status_code == 201
    assert client.post("/v1/sessions", json=body).status_code == 429


def test_a_delete_retried_after_a_503_answers_204(client: TestClient, server: Server) -> None:
    sid = client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 2}).json()["id"]
    status = _paused(server, lambda: client.delete(f"/v1/sessions/{sid}").status_code)
    assert status == 503
    assert client.get(f"/v1/sessions/{sid}").status_code == 200  # it changed nothing
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert client.get(f"/v1/sessions/{sid}").status_code == 404
    assert client.get("/v1/sessions").json()["sessions"] == []
    for _ in range(2):  # the quota has both places back
        assert client.post("/v1/sessions", json={"dim": 1}).status_code == 201
