"""Prometheus metrics at GET /metrics, and structured (JSON) request logs."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings, hash_api_key
from kameleon.service.observability import JsonFormatter, route_of
from kameleon.service.store.memory_store import MemoryStore


def _sample(client: TestClient, line: str) -> float:
    for row in client.get("/metrics").text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_requests_results_and_sessions() -> None:
    with TestClient(create_app(Settings(), store=MemoryStore())) as client:
        sid = client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 2}).json()["id"]
        (p,) = client.post(f"/v1/sessions/{sid}/ask", json={}).json()["proposals"]
        client.post(
            f"/v1/sessions/{sid}/tell", json={"results": [{"id": p["id"], "log_density": 0.0}]}
        )
        client.post(
            f"/v1/sessions/{sid}/tell", json={"results": [{"id": p["id"], "log_density": 0.0}]}
        )
        client.get("/v1/sessions/nope/whatever")
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        step = 'kameleon_requests_total{method="POST",route="/v1/sessions/{id}/tell",status="200"}'
        assert _sample(client, step) == 2
        assert _sample(client, 'kameleon_results_total{outcome="initialized"}') == 1
        assert _sample(client, 'kameleon_results_total{outcome="duplicate"}') == 1
        assert _sample(client, "kameleon_proposals_total") == 1
        assert _sample(client, "kameleon_sessions_created_total") == 1
        assert (
            _sample(client, 'kameleon_requests_total{method="GET",route="other",status="404"}') == 1
        )
        assert "kameleon_request_seconds_bucket" in response.text


def test_every_answer_says_how_long_the_service_took() -> None:
    """``Server-Timing: app;dur=<ms>``: on a success, an error and a 404 alike, a
    non-negative number of milliseconds, at most the client's own wall time."""
    with TestClient(create_app(Settings(), store=MemoryStore())) as client:
        started = time.perf_counter()
        answers = [
            client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 2}),
            client.post("/v1/sessions", json={"algorithm": "rwm", "dim": -1}),
            client.get("/v1/sessions/nope"),
            client.get("/v1/health"),
        ]
        wall_ms = 1e3 * (time.perf_counter() - started)
    assert [a.status_code for a in answers] == [201, 422, 404, 200]
    for answer in answers:
        match = re.fullmatch(r"app;dur=(\d+\.\d{3})", answer.headers["server-timing"])
        assert match is not None, answer.headers["server-timing"]
        assert 0.0 <= float(match.group(1)) <= wall_ms


def test_metrics_need_a_key_when_keys_are_set() -> None:
    settings = Settings(api_key_hashes=[hash_api_key("k")])
    with TestClient(create_app(settings, store=MemoryStore())) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer k"}).status_code == 200
    with TestClient(create_app(Settings(metrics=False), store=MemoryStore())) as client:
        assert client.get("/metrics").status_code == 404


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/sessions/abc123/step", "/v1/sessions/{id}/step"),
        ("/v1/sessions/abc123/chains/3/reset", "/v1/sessions/{id}/chains/{chain}/reset"),
        ("/v1/sessions", "/v1/sessions"),
        ("/wp-admin/x", "other"),
    ],
)
def test_routes_are_templates(path: str, route: str) -> None:
    assert route_of(path) == route


def test_json_request_logs_name_the_request_and_never_the_key(
    capfd: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(
        log_format="json", log_requests=True, api_key_hashes=[hash_api_key("sekrit")]
    )
    with TestClient(create_app(settings, store=MemoryStore())) as client:
        headers = {"X-API-Key": "sekrit"}
        sid = client.post("/v1/sessions", json={"dim": 2}, headers=headers).json()["id"]
        client.post(f"/v1/sessions/{sid}/ask", json={}, headers=headers)
    logging.getLogger("kameleon").handlers.clear()  # back to the defaults for other tests
    logging.getLogger("kameleon").propagate = True
    lines = [
        json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")
    ]
    asks = [d for d in lines if d.get("route") == "/v1/sessions/{id}/ask"]
    assert len(asks) == 1
    (ask,) = asks
    assert ask["status"] == 200 and ask["session"] == sid and ask["method"] == "POST"
    assert (
        ask["level"] == "info" and ask["logger"] == "kameleon.requests" and ask["duration_ms"] > 0
    )
    assert all("sekrit" not in json.dumps(d) for d in lines)


def test_the_json_formatter_keeps_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), None
        )
        import sys

        record.exc_info = sys.exc_info()
    doc = json.loads(JsonFormatter().format(record))
    assert doc["message"] == "failed" and "ValueError: boom" in doc["exception"]
    assert doc["time"].endswith("Z")


def test_fastapi_opentelemetry_is_off_unless_asked_for() -> None:
    import inspect

    from fastapi import FastAPI

    from kameleon.service.app import _telemetry

    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        assert _telemetry(Settings(opentelemetry=True)) == {}  # a FastAPI without it
        return
    off = _telemetry(Settings())["telemetry"]
    on = _telemetry(Settings(opentelemetry=True))["telemetry"]
    assert off == {"tracing": False, "metrics": False, "logs": False}
    assert on == {"tracing": True, "metrics": True, "logs": True}
    app = create_app(Settings())
    assert not app._native_telemetry.enabled()  # no provider lookups per request


def test_the_service_tunes_the_garbage_collector_while_it_runs() -> None:
    import gc

    from kameleon.service.app import GC_YOUNG_THRESHOLD

    before = gc.get_threshold()
    with TestClient(create_app(Settings(), store=MemoryStore())) as client:
        assert client.get("/v1/health").status_code == 200
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
    assert gc.get_threshold() == before  # given back at shutdown
