"""Things killed with SIGKILL mid-run: a worker holding proposals, a service process.

- **A dead worker.** Four worker processes drive one session with short leases; one of
  them is killed while it holds proposals. Its proposals are handed out again when their
  leases run out (same id, same point), the session completes, every chain's draws are
  the points told for it (each draw's log density is the density at its point), and no
  result is applied twice.
- **A dead service process.** Two service processes share one Redis; clients use both
  and retry on errors; one process is killed (``kill -9``) three times under load and
  started again. Afterwards every result acknowledged as applied is in the draws, none
  twice, and every chain's iteration count equals its number of draws.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.servers import KAMELEON, free_port, serving, wait_for_health

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent(
    """
    import json, sys, time
    import httpx

    url, sid, log, hold = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "hold"
    client = httpx.Client(base_url=url, timeout=30)

    def logp(x):
        return -0.5 * sum(v * v for v in x)

    with open(log, "a") as out:
        while True:
            answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2, "wait_seconds": 1}).json()
            if answer["done"]:
                break
            proposals = answer["proposals"]
            if hold and proposals:
                out.write(json.dumps({"held": [p["id"] for p in proposals]}) + "\\n")
                out.flush()
                time.sleep(3600)  # killed here, holding them
            results = [{"id": p["id"], "log_density": logp(p["x"])} for p in proposals]
            if not results:
                continue
            told = client.post(f"/v1/sessions/{sid}/tell", json={"results": results})
            if told.status_code == 409:
                continue  # answered by another worker after our lease ran out
            for r in told.json()["results"]:
                out.write(json.dumps({"id": r["id"], "outcome": r["outcome"]}) + "\\n")
            out.flush()
    """
)

CHAINS, ITERATIONS = 6, 60
#: Long enough that the run outlasts three kills and restarts (a few seconds).
ITERATIONS_UNDER_KILLS = 3000


def _logp(x: list[float]) -> float:
    return -0.5 * float(np.dot(x, x))


def test_a_killed_worker_holding_proposals_loses_nothing(tmp_path: Path) -> None:
    import json

    port = free_port()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {"KAMELEON_STORE": "memory", "KAMELEON_DEFAULT_LEASE_SECONDS": "1"}
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        body = {"algorithm": "am", "dim": 2, "chains": CHAINS, "seed": 9, "warmup": 20}
        sid = httpx.post(url + "/v1/sessions", json={**body, "max_iterations": ITERATIONS}).json()[
            "id"
        ]
        logs = [tmp_path / f"worker{k}.log" for k in range(4)]
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), url, sid, str(log), "hold" if k == 0 else "work"]
            )
            for k, log in enumerate(logs)
        ]
        try:
            deadline = time.monotonic() + 60
            while "held" not in (logs[0].read_text() if logs[0].exists() else ""):
                assert time.monotonic() < deadline, "the worker never held proposals"
                time.sleep(0.05)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(timeout=10)
            for proc in procs[1:]:
                assert proc.wait(timeout=120) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        held = json.loads(logs[0].read_text().splitlines()[0])["held"]
        told = [json.loads(line) for log in logs[1:] for line in log.read_text().splitlines()]
        summary = httpx.get(f"{url}/v1/sessions/{sid}").json()
        draws = httpx.get(
            f"{url}/v1/sessions/{sid}/draws", params={"include_warmup": "true"}
        ).json()

    assert summary["status"] == "done"
    applied = Counter(t["id"] for t in told if t["outcome"] in ("accepted", "rejected"))
    assert all(n == 1 for n in applied.values()), "a result was applied twice"
    assert len(applied) == CHAINS * ITERATIONS
    assert set(held) <= set(applied) | {i for i in held if i.endswith(".i0")}
    for chain in draws["chains"]:
        assert chain["iterations"] == list(range(1, ITERATIONS + 1))
        for x, value in zip(chain["draws"], chain["log_density"], strict=True):
            assert value == pytest.approx(_logp(x), rel=0, abs=1e-12)


def test_service_processes_killed_under_load_lose_and_double_nothing(
    redis_url: str, redis_prefix: str
) -> None:
    env = {
        "KAMELEON_STORE": "redis",
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": redis_prefix,
        "KAMELEON_DEFAULT_LEASE_SECONDS": "2",
    }
    victim_port, steady_port = free_port(), free_port()
    environment = {**os.environ, **env}

    def start(port: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [KAMELEON, "serve", "--port", str(port)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_health(f"http://127.0.0.1:{port}", proc)
        return proc

    victim = start(victim_port)
    with serving([KAMELEON, "serve", "--port", str(steady_port)], env, steady_port) as steady:
        urls = [f"http://127.0.0.1:{victim_port}", steady]
        body = {"algorithm": "rwm", "dim": 2, "chains": 8, "seed": 3, "warmup": 10}
        sid = httpx.post(
            steady + "/v1/sessions", json={**body, "max_iterations": ITERATIONS_UNDER_KILLS}
        ).json()["id"]
        applied: Counter[str] = Counter()
        lock = threading.Lock()
        errors: list[str] = []
        failed = [0]  # requests that met a dead process

        def client(k: int) -> None:
            with httpx.Client(timeout=10) as http:
                run(http, k)

        def run(http: httpx.Client, k: int) -> None:
            proposals: list[dict[str, object]] = []
            turn = k
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                turn += 1
                url = f"{urls[turn % 2]}/v1/sessions/{sid}/step"
                results = [
                    {"id": p["id"], "log_density": _logp(p["x"])}  # type: ignore[arg-type]
                    for p in proposals
                ]
                try:
                    response = http.post(
                        url, json={"results": results, "max": 2, "wait_seconds": 1}
                    )
                except httpx.HTTPError:
                    with lock:
                        failed[0] += 1
                    continue  # the process died: the same results again, elsewhere
                if response.status_code == 503:
                    continue
                if response.status_code == 409:
                    refused = set(response.json()["ids"])
                    proposals = [p for p in proposals if p["id"] not in refused]
                    continue
                if response.status_code != 200:
                    with lock:
                        errors.append(response.text)
                    return
                answer = response.json()
                with lock:
                    applied.update(
                        r["id"]
                        for r in answer["results"]
                        if r["outcome"] in ("accepted", "rejected")
                    )
                proposals = answer["proposals"]
                if answer["done"]:
                    return

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        try:
            for _ in range(3):
                time.sleep(0.3)
                victim.send_signal(signal.SIGKILL)
                victim.wait(timeout=10)
                time.sleep(0.3)
                victim = start(victim_port)
            # The kills happened under load: the run was still going after the last one.
            under_load = any(t.is_alive() for t in threads)
            for t in threads:
                t.join(timeout=150)
        finally:
            victim.kill()
            victim.wait(timeout=10)
        summary = httpx.get(f"{steady}/v1/sessions/{sid}").json()
        draws = httpx.get(
            f"{steady}/v1/sessions/{sid}/draws",
            params={"include_warmup": "true", "page_size": 100_000},
        ).json()

    assert not errors, errors
    assert under_load, "the run ended before the kills: make it longer"
    assert failed[0] > 0  # requests met the dead process
    assert summary["status"] == "done"
    assert all(n == 1 for n in applied.values()), "a result was applied twice"
    for chain, chain_summary in zip(draws["chains"], summary["chain_summaries"], strict=True):
        assert chain["iterations"] == list(range(1, ITERATIONS_UNDER_KILLS + 1))
        assert chain_summary["iterations"] == len(chain["draws"]) == ITERATIONS_UNDER_KILLS
        mine = {i for i in applied if i.startswith(f"c{chain['chain']}.")}
        # Every result acknowledged as applied is a draw of its chain (the rest of the
        # chain's transitions were applied by requests whose answer a kill lost).
        assert {int(i.split(".i")[1]) for i in mine} <= set(chain["iterations"])
        for x, value in zip(chain["draws"], chain["log_density"], strict=True):
            assert value == pytest.approx(_logp(x), rel=0, abs=1e-12)
