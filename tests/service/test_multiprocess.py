"""Many workers, two service processes, one Redis: every told result is applied once.

Two ``kameleon serve --store redis`` processes share one Redis. Eight client threads
drive one session of 16 chains through both: they ask with leases, answer in random
order, send some answers twice, and one of them "dies" now and then (takes proposals
and never answers), so that their leases run out and others pick the same proposals up.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict

import httpx
import numpy as np
import pytest

from tests.servers import KAMELEON, free_port, serving

pytestmark = pytest.mark.slow  # two service processes under load

CHAINS, ITERATIONS, WORKERS = 16, 25, 8


def _logp(x: list[float]) -> float:
    return -0.5 * float(np.dot(x, x))


def test_two_processes_eight_workers_exactly_once(redis_url: str, redis_prefix: str) -> None:
    ports = [free_port(), free_port()]
    env = {
        "KAMELEON_STORE": "redis",
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": redis_prefix,
    }
    with (
        serving([KAMELEON, "serve", "--port", str(ports[0])], env, ports[0]) as a,
        serving([KAMELEON, "serve", "--port", str(ports[1])], env, ports[1]) as b,
    ):
        created = httpx.post(
            f"{a}/v1/sessions",
            json={
                "algorithm": "rwm",
                "dim": 3,
                "chains": CHAINS,
                "seed": 7,
                "warmup": 5,
                "max_iterations": ITERATIONS,
            },
        )
        assert created.status_code == 201
        sid = created.json()["id"]

        lock = threading.Lock()
        outcomes: dict[str, list[str]] = defaultdict(list)
        points: dict[str, list[float]] = {}
        errors: list[str] = []

        def worker(index: int) -> None:
            rng = random.Random(index)
            clients = [httpx.Client(base_url=u, timeout=30) for u in (a, b)]
            try:
                for _ in range(2000):
                    client = rng.choice(clients)
                    lease = 0.3 if rng.random() < 0.1 else 10.0
                    answer = client.post(
                        f"/v1/sessions/{sid}/ask", json={"max": 3, "lease_seconds": lease}
                    )
                    body = answer.json()
                    if body["done"]:
                        return
                    proposals = body["proposals"]
                    with lock:
                        for p in proposals:  # a re-issued proposal is the same point
                            assert points.setdefault(p["id"], p["x"]) == p["x"], p["id"]
                    if lease < 1:
                        continue  # this worker "dies": its leases run out
                    rng.shuffle(proposals)
                    for p in proposals:
                        result = {"id": p["id"], "log_density": _logp(p["x"])}
                        copies = 2 if rng.random() < 0.2 else 1
                        for _ in range(copies):
                            told = rng.choice(clients).post(
                                f"/v1/sessions/{sid}/tell", json={"results": [result]}
                            )
                            if told.status_code != 200:
                                with lock:
                                    errors.append(f"{told.status_code} {told.text}")
                                continue
                            with lock:
                                outcomes[p["id"]].append(told.json()["results"][0]["outcome"])
            except Exception as exc:  # surfaced below
                with lock:
                    errors.append(repr(exc))
            finally:
                for c in clients:
                    c.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors[:5]

        summary = httpx.get(f"{b}/v1/sessions/{sid}").json()
        assert summary["status"] == "done"
        applied = Counter()
        for pid, seen in outcomes.items():
            firsts = [o for o in seen if o != "duplicate"]
            assert len(firsts) == 1, (pid, seen)  # applied exactly once, the rest duplicates
            if firsts[0] in ("accepted", "rejected"):
                applied[int(pid.split(".")[0][1:])] += 1
        draws = httpx.get(f"{a}/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
        for chain in draws["chains"]:
            c = chain["chain"]
            assert len(chain["draws"]) == ITERATIONS == applied[c]
            assert chain["iterations"] == list(range(1, ITERATIONS + 1))
        per_chain = {c["chain"]: c for c in summary["chain_summaries"]}
        assert all(per_chain[c]["iterations"] == ITERATIONS for c in range(CHAINS))
        assert any(len(seen) > 1 for seen in outcomes.values()), "no duplicate was exercised"
