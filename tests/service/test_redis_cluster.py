"""The service on a Redis Cluster (three primaries, a replica each), through a failover.

The store contract suite runs on the cluster too (``test_store_contract.py``); here the
service runs on it over HTTP, and the primary that serves a session is killed in the
middle of a run. While the cluster fails over, the service answers 503 problem+json
(never 5xx otherwise), and afterwards the run goes on to the end, without a restart, on
the promoted replica, and every result acknowledged as applied is in the draws.
Replication is asynchronous: a result applied in the last moments before a primary dies
may not have reached its replica. The test lets the replica catch up before the kill
(``WAIT``), so that it checks the failover itself; the README ("Operating Kameleon")
says what an operator can expect otherwise.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.store.redis_store import RedisStore
from tests.redis_cluster import Cluster, start_cluster
from tests.redis_server import find_server_binary

pytestmark = pytest.mark.slow

CHAINS, ITERATIONS = 4, 60


@pytest.fixture
def redis_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own: it kills one of its nodes (the session's shared
    cluster serves the store contract suite)."""
    binary = find_server_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no redis-server")
        pytest.skip("no redis-server")
    with start_cluster(binary) as cluster:
        yield cluster


@pytest.fixture
def client(redis_cluster: Cluster) -> Iterator[TestClient]:
    store = RedisStore.from_url(redis_cluster.url, prefix=f"t-{uuid.uuid4().hex[:8]}")
    app = create_app(Settings(), store=store)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
        assert test_client.portal is not None
        test_client.portal.call(store.close)


def _value(p: dict[str, Any]) -> float:
    return -0.5 * sum(v * v for v in p["x"])


def test_a_run_survives_the_failover_of_its_primary(
    client: TestClient, redis_cluster: Cluster
) -> None:
    body = {"algorithm": "am", "dim": 2, "chains": CHAINS, "seed": 5, "warmup": 20}
    created = client.post("/v1/sessions", json={**body, "max_iterations": ITERATIONS})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    primary = redis_cluster.primary_of(f"{{{sid}}}")  # the session's hash tag

    proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": CHAINS}).json()["proposals"]
    acknowledged: dict[str, float] = {}
    statuses: list[int] = []
    killed_at = None
    deadline = time.monotonic() + 90
    steps = 0
    while proposals or steps == 0:
        assert time.monotonic() < deadline, "the run did not finish"
        steps += 1
        if steps == 15:
            # Replication is asynchronous: let the replica catch up, so that the test is
            # about the failover, not about the last milliseconds' writes.
            redis_cluster.replicated(primary)
            redis_cluster.kill(primary)
            killed_at = time.monotonic()
        results = [{"id": p["id"], "log_density": _value(p)} for p in proposals]
        response = client.post(
            f"/v1/sessions/{sid}/step",
            json={"results": results, "max": CHAINS, "lease_seconds": 2},
        )
        statuses.append(response.status_code)
        if response.status_code == 503:
            assert response.headers["content-type"].startswith("application/problem+json")
            time.sleep(0.2)
            continue  # the same results again: tells are idempotent
        assert response.status_code == 200, response.text
        answer = response.json()
        acknowledged.update({r["id"]: r["outcome"] for r in answer["results"]})
        proposals = answer["proposals"]
        if not proposals and not answer["done"]:
            # Proposals leased to an answer lost in the failover come back after 2 s.
            time.sleep(0.5)
            proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": CHAINS}).json()[
                "proposals"
            ]

    assert killed_at is not None and set(statuses) <= {200, 503}
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["status"] == "done"
    assert [c["iterations"] for c in summary["chain_summaries"]] == [ITERATIONS] * CHAINS
    draws = client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    for chain in draws["chains"]:
        assert chain["iterations"] == list(range(1, ITERATIONS + 1))
    # Every result acknowledged as applied is part of its chain's history.
    applied = {i for i, outcome in acknowledged.items() if outcome in ("accepted", "rejected")}
    assert len(applied) == CHAINS * ITERATIONS
    by_chain: dict[int, set[int]] = {}
    for proposal_id in applied:
        chain, iteration = proposal_id.removeprefix("c").split(".i")
        by_chain.setdefault(int(chain), set()).add(int(iteration))
    for chain, iterations in by_chain.items():
        assert iterations <= set(draws["chains"][chain]["iterations"])
