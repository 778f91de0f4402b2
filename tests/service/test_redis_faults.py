"""Redis faults, on a throwaway server of the test's own: paused (SIGSTOP) and restarted.

- **Paused.** A stalled Redis keeps the commands sent to it and runs them when it
  resumes, after the service has given up on them. The service answers 503 within its
  store timeout, and a 503 must mean "nothing changed": the apply script checks a
  deadline and changes nothing when it runs late. So a retried tell is applied (not
  answered ``duplicate``) and a retried ask gets chains that nobody leased meanwhile.
- **Restarted** with the append-only file: while it is down the service answers 503
  problem+json and changes nothing; when it is back the run goes on without restarting
  the service (the pool's dead connections are replaced, not answered 503), and every
  result acknowledged before the restart is still there. Every connection the pool
  held when Redis went down is dead; each is replaced when next used, so many requests
  at once right after the restart (each on a connection of its own) answer 200 too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.store.redis_store import RedisStore
from tests.redis_server import find_server_binary

pytestmark = pytest.mark.slow

TIMEOUT = 1.0  # the service's store timeout in these tests


class Server:
    """A redis-server on a fixed port and directory, that can be paused and restarted."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary, self.directory = binary, directory
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.directory), "--save", "", "--appendonly", "yes"]
        argv += ["--appendfsync", "always", "--loglevel", "warning"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)


@contextmanager
def private_server() -> Iterator[Server]:
    """A Redis server of the test's own, to stall, kill and restart (a failure under
    ``CI=true`` when there is no ``redis-server``, else a skip)."""
    binary = find_server_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no redis-server")
        pytest.skip("no redis-server")
    with tempfile.TemporaryDirectory(prefix="kameleon-faults-") as tmp:
        srv = Server(binary, Path(tmp))
        srv.start()
        try:
            yield srv
        finally:
            if srv.proc is not None and srv.proc.poll() is None:
                srv.signal(signal.SIGCONT)
                srv.kill()


@contextmanager
def client_of(server: Server, settings: Settings, timeout: float) -> Iterator[TestClient]:
    """A client of an app on ``server`` whose store gives up after ``timeout`` seconds."""
    store = RedisStore.from_url(server.url, prefix="faults", timeout=timeout)
    with TestClient(create_app(settings, store=store), raise_server_exceptions=False) as c:
        yield c
        assert c.portal is not None
        c.portal.call(store.close)


@pytest.fixture
def server() -> Iterator[Server]:
    with private_server() as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[TestClient]:
    with client_of(server, Settings(), TIMEOUT) as c:
        yield c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def app_client(
    store: RedisStore, settings: Settings | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The app on ``store``, served in this event loop (requests run concurrently)."""
    app = create_app(settings or Settings(), store=store)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://kameleon", timeout=60
            ) as client:
                yield client
    finally:
        await store.close()


async def create_sessions(client: httpx.AsyncClient, count: int, chains: int = 2) -> list[str]:
    body = {"algorithm": "rwm", "dim": 2, "chains": chains}
    created = [await client.post("/v1/sessions", json=body) for _ in range(count)]
    assert {r.status_code for r in created} == {201}, created[0].text
    return [r.json()["id"] for r in created]


def told(proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])} for p in proposals]


def test_a_503_from_a_paused_redis_changed_nothing(client: TestClient, server: Server) -> None:
    sid = client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 2, "chains": 2}).json()["id"]
    base = f"/v1/sessions/{sid}"
    inits = client.post(base + "/ask", json={"max": 2}).json()["proposals"]
    assert client.post(base + "/tell", json={"results": told(inits)}).status_code == 200
    first = client.post(base + "/ask", json={"max": 1, "lease_seconds": 60}).json()["proposals"]

    server.signal(signal.SIGSTOP)
    try:
        for path, body in (
            ("/tell", {"results": told(first)}),
            ("/ask", {"max": 2, "request_id": "paused-ask"}),
        ):
            started = time.monotonic()
            response = client.post(base + path, json=body)
            assert time.monotonic() - started < TIMEOUT + 1.5
            assert response.status_code == 503, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.headers["retry-after"]
    finally:
        server.signal(signal.SIGCONT)
    time.sleep(0.3)  # Redis runs the queued scripts now, past their deadline
    metrics = client.get("/metrics").text
    assert metric(metrics, "kameleon_store_unavailable_total") == 2
    assert metric(metrics, "kameleon_store_busy_total") == 0

    # The tell had changed nothing: its retry is applied, not answered duplicate.
    retold = client.post(base + "/tell", json={"results": told(first)}).json()["results"]
    assert [r["outcome"] for r in retold] != ["duplicate"]
    # The ask had leased nothing: its retry leases both chains (the told one's next
    # proposal and the other, never leased since the initial points).
    again = client.post(base + "/ask", json={"max": 2, "request_id": "paused-ask"}).json()
    assert sorted(p["chain"] for p in again["proposals"]) == [0, 1]


def test_a_restarted_redis_loses_nothing_and_needs_no_service_restart(
    client: TestClient, server: Server
) -> None:
    body = {"algorithm": "am", "dim": 2, "chains": 2, "seed": 4, "warmup": 5, "max_iterations": 30}
    sid = client.post("/v1/sessions", json=body).json()["id"]
    base = f"/v1/sessions/{sid}"
    proposals = client.post(base + "/ask", json={"max": 2}).json()["proposals"]
    applied: set[str] = set()

    def step() -> Any:
        response = client.post(base + "/step", json={"results": told(proposals), "max": 2})
        if response.status_code == 200:
            outcomes = response.json()["results"]
            applied.update(r["id"] for r in outcomes if r["outcome"] in ("accepted", "rejected"))
        return response

    for _ in range(10):
        proposals = step().json()["proposals"]
    before = client.get(base).json()

    server.kill()
    down = step()
    assert down.status_code == 503, down.text
    assert down.headers["content-type"].startswith("application/problem+json")
    server.start()  # the same port and append-only file

    assert client.get(base).json() == before  # nothing lost, nothing changed while down
    statuses = []
    while proposals:
        response = step()
        statuses.append(response.status_code)
        proposals = response.json()["proposals"]
    assert set(statuses) == {200}  # no 503 from a pooled connection of the old server
    summary = client.get(base).json()
    assert summary["status"] == "done"
    draws = client.get(base + "/draws", params={"include_warmup": "true"}).json()
    for chain in draws["chains"]:
        assert chain["iterations"] == list(range(1, 31))
        mine = {int(i.split(".i")[1]) for i in applied if i.startswith(f"c{chain['chain']}.")}
        assert mine == set(range(1, 31))  # every acknowledged result is there, once


@pytest.mark.anyio
async def test_concurrent_requests_right_after_a_redis_restart_get_no_503(
    server: Server,
) -> None:
    """Every request on a connection of its own, each of them dead after the restart:
    none answers 503, after one restart and after a second one. (A store timeout of 5 s:
    a dead connection answers at once, and a loaded machine must not make a slow but
    healthy store look like one.)"""
    store = RedisStore.from_url(server.url, prefix="restart", timeout=5.0)
    async with app_client(store) as client:
        sids = await create_sessions(client, 60, chains=4)

        async def ask_all() -> list[int]:
            answers = await asyncio.gather(
                *(client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}) for sid in sids)
            )
            return [r.status_code for r in answers]

        assert set(await ask_all()) == {200}  # the pool holds many connections now
        for _ in range(2):
            server.kill()
            server.start()
            assert set(await ask_all()) == {200}
        # One at a time afterwards: the pool's idle connections are good too.
        for sid in sids[:20]:
            response = await client.get(f"/v1/sessions/{sid}")
            assert response.status_code == 200, response.text


def metric(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


@pytest.mark.anyio
async def test_more_requests_than_store_connections_wait_for_one(server: Server) -> None:
    """300 requests at once on a pool of 4 connections: each waits for a connection
    (none answers 503), and the pool never runs out."""
    store = RedisStore.from_url(server.url, prefix="pool", timeout=5.0, max_connections=4)
    async with app_client(store) as client:
        sids = await create_sessions(client, 30)
        answers = await asyncio.gather(
            *(client.post(f"/v1/sessions/{sids[i % 30]}/ask", json={"max": 1}) for i in range(300))
        )
        assert {r.status_code for r in answers} == {200}, answers[0].text
        leased = [(r.url.path, p["id"]) for r in answers for p in r.json()["proposals"]]
        assert len(leased) == len(set(leased)) == 60  # every chain of every session, once
        metrics = (await client.get("/metrics")).text
        assert metric(metrics, "kameleon_store_unavailable_total") == 0
        assert metric(metrics, "kameleon_store_busy_total") == 0


@pytest.mark.anyio
async def test_a_long_poll_holds_no_store_connection_while_it_waits(server: Server) -> None:
    """Two connections, twenty long polls waiting at once: other requests are served
    meanwhile."""
    store = RedisStore.from_url(server.url, prefix="poll", timeout=TIMEOUT, max_connections=2)
    async with app_client(store) as client:
        busy, *others = await create_sessions(client, 11)
        leased = await client.post(f"/v1/sessions/{busy}/ask", json={"max": 2})
        assert len(leased.json()["proposals"]) == 2  # nothing left to hand out
        poll = {"max": 1, "wait_seconds": 5 * TIMEOUT}
        polls = [
            asyncio.create_task(client.post(f"/v1/sessions/{busy}/ask", json=poll))
            for _ in range(20)
        ]
        await asyncio.sleep(0.5)  # they are waiting now
        # Had the polls kept the two connections, these would wait for one in vain and
        # answer 503 after the store timeout.
        for sid in others:
            response = await client.post(f"/v1/sessions/{sid}/ask", json={"max": 1})
            assert response.status_code == 200, response.text
        assert not any(p.done() for p in polls)
        waited = await asyncio.gather(*polls)
        assert {r.status_code for r in waited} == {200}
        assert all(r.json()["proposals"] == [] for r in waited)


@pytest.mark.anyio
async def test_a_process_with_every_store_connection_in_use_answers_503_busy(
    server: Server,
) -> None:
    """No connection frees up within the store timeout: 503 ``service-busy`` with
    Retry-After, counted as busy, not as an unavailable store; nothing changed."""
    store = RedisStore.from_url(server.url, prefix="busy", timeout=TIMEOUT, max_connections=2)
    async with app_client(store) as client:
        (sid,) = await create_sessions(client, 1)
        for _ in range(store.slots.size):  # every store operation of the process is busy
            await store.slots.acquire()
        started = time.monotonic()
        answers = await asyncio.gather(
            *(client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}) for _ in range(5))
        )
        assert time.monotonic() - started < TIMEOUT + 2.0  # waited the timeout, no more
        for response in answers:
            assert response.status_code == 503, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.headers["retry-after"] == "1"
            problem = response.json()
            assert problem["type"].endswith("/service-busy")
            assert "busy" in problem["detail"] and "unreachable" not in problem["detail"]
        metrics = (await client.get("/metrics")).text
        assert metric(metrics, "kameleon_store_busy_total") == 5
        assert metric(metrics, "kameleon_store_unavailable_total") == 0
        for _ in range(store.slots.size):
            store.slots.release()
        # Nothing was leased by the refused asks: both chains are free.
        again = await client.post(f"/v1/sessions/{sid}/ask", json={"max": 2})
        assert again.status_code == 200
        assert len(again.json()["proposals"]) == 2
