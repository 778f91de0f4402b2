"""Load: many sessions at once on Redis, two service processes, for a fixed time.

Run from the repository root (a Redis server must be reachable; by default the one at
redis://127.0.0.1:6379/0, keys under a prefix of this run, deleted afterwards):

    .venv/bin/python bench/load_bench.py [--sessions 100] [--chains 4] [--seconds 60]
        [--service-processes 2] [--clients 4] [--redis-url URL]

``--clients`` client processes share the sessions; each steps each of its sessions in
turn (tell every chain's result, ask for every chain's next proposal), with a standard
normal in d = 8 as the density. The run reports the results applied per second (tells
whose outcome is accepted or rejected), the step latency percentiles, the answers that
were not 200, and then checks that nothing was lost or doubled: every session's chains
made exactly as many transitions as the clients had results applied.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from pathlib import Path

import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_bench import Client, create, logp, percentile, service


def _client(args: tuple[int, list[str], int, float]) -> dict[str, object]:
    """Step ``sessions`` round robin until ``deadline``; what happened."""
    port, sessions, chains, deadline = args
    client = Client(port)
    proposals: dict[str, list[dict[str, object]]] = {}
    for sid in sessions:
        _, raw = client.post(f"/v1/sessions/{sid}/ask", {"max": chains})
        proposals[sid] = orjson.loads(raw)["proposals"]
    applied, statuses, latencies = 0, {}, []
    while time.time() < deadline:
        for sid in sessions:
            results = [
                {"id": p["id"], "log_density": logp(p["x"])}  # type: ignore[arg-type]
                for p in proposals[sid]
            ]
            t = time.perf_counter()
            status, raw = client.post(
                f"/v1/sessions/{sid}/step", {"results": results, "max": chains}
            )
            latencies.append(time.perf_counter() - t)
            statuses[status] = statuses.get(status, 0) + 1
            if status != 200:
                continue  # the same results go again next round: tells are idempotent
            answer = orjson.loads(raw)
            applied += sum(r["outcome"] in ("accepted", "rejected") for r in answer["results"])
            proposals[sid] = answer["proposals"]
    return {"applied": applied, "statuses": statuses, "latencies": latencies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--service-processes", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("KAMELEON_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    prefix = f"kameleon-bench-{uuid.uuid4().hex[:8]}"
    try:
        with service("redis", args.service_processes, args.redis_url, prefix) as port:
            client = Client(port)
            ids = [create(client, "rwm", args.chains, warmup=100) for _ in range(args.sessions)]
            deadline = time.time() + args.seconds
            shares = [
                (port, ids[k :: args.clients], args.chains, deadline) for k in range(args.clients)
            ]
            started = time.perf_counter()
            with mp.get_context("spawn").Pool(args.clients) as pool:
                outcomes = pool.map(_client, shares)
            elapsed = time.perf_counter() - started
            transitions = 0
            client = Client(port)  # the first one's idle connection was closed meanwhile
            for sid in ids:
                _, raw = client.get(f"/v1/sessions/{sid}")
                transitions += sum(c["iterations"] for c in orjson.loads(raw)["chain_summaries"])
    finally:
        cleaner = redis.Redis.from_url(args.redis_url)
        keys = list(cleaner.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            cleaner.delete(*keys[start : start + 1000])
        cleaner.close()
    applied = sum(int(o["applied"]) for o in outcomes)  # type: ignore[call-overload]
    latencies = [x for o in outcomes for x in o["latencies"]]  # type: ignore[attr-defined]
    statuses: dict[str, int] = {}
    for o in outcomes:
        for code, n in o["statuses"].items():  # type: ignore[attr-defined]
            statuses[str(code)] = statuses.get(str(code), 0) + n
    figures = {
        "sessions": args.sessions,
        "chains": args.chains,
        "service_processes": args.service_processes,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "tells_per_second": round(applied / elapsed),
        "step_p50_ms": round(1e3 * percentile(latencies, 0.5), 2),
        "step_p99_ms": round(1e3 * percentile(latencies, 0.99), 2),
        "statuses": statuses,
        # Transitions include the initial points, which the first round of steps tells.
        "applied": applied,
        "transitions_in_the_store": transitions,
        "lost_or_doubled": transitions - applied,
    }
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
