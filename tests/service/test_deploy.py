"""What can be checked of the deployment without a container engine: the CLI serves
health on each store, the Dockerfile's files exist, its command line starts a service,
and the compose file names both services."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.servers import KAMELEON, free_port, serving

pytestmark = pytest.mark.slow  # starts service processes

ROOT = Path(__file__).resolve().parents[2]


def _env_without_kameleon() -> dict[str, str]:
    return {k: "" for k in os.environ if k.startswith("KAMELEON_")}


def test_serve_defaults_to_memory_on_loopback() -> None:
    port = free_port()
    with serving([KAMELEON, "serve", "--port", str(port)], _env_without_kameleon(), port) as url:
        body = httpx.get(url + "/v1/health").json()
        assert body["store"] == "memory" and body["store_ready"] is True
        created = httpx.post(url + "/v1/sessions", json={"algorithm": "rwm", "dim": 1})
        assert created.status_code == 201


def test_serve_takes_its_settings_from_the_environment(redis_url: str) -> None:
    port = free_port()
    env = {
        **_env_without_kameleon(),
        "KAMELEON_PORT": str(port),
        "KAMELEON_STORE": "redis",
        "KAMELEON_REDIS_URL": redis_url,
    }
    with serving([KAMELEON, "serve"], env, port) as url:
        body = httpx.get(url + "/v1/health").json()
        assert body == {**body, "store": "redis", "store_ready": True, "status": "ok"}


def test_health_is_503_when_redis_is_unreachable() -> None:
    port, dead = free_port(), free_port()
    argv = [
        KAMELEON,
        "serve",
        "--port",
        str(port),
        "--store",
        "redis",
        "--redis-url",
        f"redis://127.0.0.1:{dead}/0",
    ]
    with serving(argv, _env_without_kameleon(), port) as url:
        answer = httpx.get(url + "/v1/health")
        assert answer.status_code == 503 and answer.json()["store_ready"] is False
        created = httpx.post(url + "/v1/sessions", json={"algorithm": "rwm", "dim": 1})
        assert created.status_code == 503
        assert created.headers["content-type"] == "application/problem+json"


def test_workers_need_a_shared_store() -> None:
    out = subprocess.run(
        [KAMELEON, "serve", "--workers", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, **_env_without_kameleon()},
        timeout=30,
    )
    assert out.returncode == 2 and "--store redis" in out.stderr


def test_an_unknown_store_is_refused_naming_the_stores() -> None:
    out = subprocess.run(
        [KAMELEON, "serve", "--store", "postgres"],
        capture_output=True,
        text=True,
        env={**os.environ, **_env_without_kameleon()},
        timeout=30,
    )
    assert out.returncode == 2, out.stderr
    assert "no store 'postgres'" in out.stderr and "memory, redis" in out.stderr


def test_a_store_backend_is_one_registry_entry() -> None:
    # A backend that the registry names is what --store accepts and the app builds.
    from kameleon.service.app import create_app
    from kameleon.service.config import Settings
    from kameleon.service.store import backends
    from kameleon.service.store.memory_store import MemoryStore

    class Toy(MemoryStore):
        name = "toy"

    entry = backends.Backend("toy", lambda settings: Toy(), False, "a test double")
    backends.STORES["toy"] = entry
    try:
        app = create_app(Settings(store="toy"))
        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            assert client.get("/v1/health").json()["store"] == "toy"
    finally:
        del backends.STORES["toy"]


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8")


def test_every_file_the_dockerfile_copies_exists() -> None:
    sources = []
    for line in _dockerfile().splitlines():
        if not line.startswith("COPY "):
            continue
        parts = shlex.split(line)
        if not any(p.startswith("--from") for p in parts):
            sources += parts[1:-1]
    assert sources, "the Dockerfile copies nothing"
    for src in sources:
        assert (ROOT / src).exists(), src


def test_dockerfile_runs_as_non_root_with_healthcheck() -> None:
    text = _dockerfile()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2  # multi-stage
    assert re.search(r"^USER (?!root)\S+", text, re.M)
    assert "EXPOSE 8000" in text and "HEALTHCHECK" in text and "/v1/health" in text


def test_compose_names_redis_with_appendonly_and_the_service() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert {"redis", "kameleon"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    assert services["kameleon"]["build"] == "."
    assert "KAMELEON_REDIS_URL" in services["kameleon"]["environment"]


def test_readme_opens_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    run_cmd, test_cmd = blocks[0].strip(), blocks[1].strip()
    assert "kameleon serve" in run_cmd and "pytest" in test_cmd
    assert "\n" not in run_cmd and "\n" not in test_cmd
    assert readme.index(test_cmd) < 400, "the two commands open the README"
    assert test_cmd in ci.splitlines(), ".ci/run must run the README's test command exactly"


def test_several_workers_share_sessions_through_redis(redis_url: str, redis_prefix: str) -> None:
    port = free_port()
    env = {
        **_env_without_kameleon(),
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": redis_prefix,
    }
    argv = [KAMELEON, "serve", "--port", str(port), "--workers", "2", "--store", "redis"]
    with serving(argv, env, port) as url:
        created = httpx.post(url + "/v1/sessions", json={"algorithm": "rwm", "dim": 2, "chains": 4})
        assert created.status_code == 201
        sid = created.json()["id"]
        # new connections land on either process; every one sees the session
        for _ in range(8):
            with httpx.Client(base_url=url) as client:
                assert client.get(f"/v1/sessions/{sid}").status_code == 200
                asked = client.post(
                    f"/v1/sessions/{sid}/ask", json={"max": 1, "lease_seconds": 0.01}
                )
                assert asked.status_code == 200


def test_a_request_that_never_arrives_whole_is_cut_off() -> None:
    """A client that opens a connection and sends nothing, or sends half its headers, or
    half its body, is cut off after request_read_timeout_seconds (408 when its headers
    never completed); a whole request on a keep-alive connection is served as usual."""
    import socket
    import time

    port = free_port()
    env = {**_env_without_kameleon(), "KAMELEON_REQUEST_READ_TIMEOUT_SECONDS": "1"}
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        partial = (
            b"",
            b"GET /v1/health HTTP/1.1\r\nHost: x\r\n",
            b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n{",
        )
        socks = []
        for sent in partial:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(sent)
            socks.append(sock)
        time.sleep(2.0)
        answers = []
        for sock in socks:
            sock.settimeout(5)
            chunks = []
            while chunk := sock.recv(4096):  # b"": the service closed the connection
                chunks.append(chunk)
            answers.append(b"".join(chunks))
            sock.close()
        assert answers[0].startswith(b"HTTP/1.1 408") and answers[1].startswith(b"HTTP/1.1 408")
        assert answers[2] == b""  # its body stalled: closed, nothing created
        with httpx.Client() as client:  # keep-alive: one connection, idle past the timeout
            assert client.get(url + "/v1/health").status_code == 200
            time.sleep(1.5)
            assert client.get(url + "/v1/health").status_code == 200
        assert httpx.get(url + "/v1/sessions").json()["sessions"] == []
