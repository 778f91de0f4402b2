"""Rounds (PROTOCOL.md, "Rounds"): evaluations per second of a population sampler with an
expensive log density and many workers, this checkout's service against another's
(one without rounds hands out one evaluation per chain at a time).

The same client drives both: one thread asks for a point per worker, evaluates them side
by side in a pool of ``--workers`` threads (the log density sleeps ``--cost`` seconds, a
stand-in for a simulator that releases the GIL), and tells them back in one step. Both
services must give the same draws, bit for bit (rounds change when points are handed
out, not what the chain does): the script checks it.

    git worktree add /tmp/kameleon-before <commit>
    .venv/bin/python bench/rounds_bench.py --before /tmp/kameleon-before

``--before`` is a checkout of the service to compare with, run from its own tree with
this environment's packages; without it only this checkout is measured.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.service_bench import free_port, running

CASES: dict[str, dict[str, Any]] = {
    "smc": {"dim": 4, "chains": 2, "warmup": 600, "iterations": 200, "options": {"particles": 32}},
    "ensemble": {
        "dim": 4,
        "chains": 2,
        "warmup": 400,
        "iterations": 400,
        "options": {"walkers": 32},
    },
    "tempering": {
        "dim": 4,
        "chains": 2,
        "warmup": 60,
        "iterations": 40,
        "options": {"temperatures": 8},
    },
}


def logdensity(x: list[float], cost: float) -> float:
    time.sleep(cost)
    v = np.asarray(x)
    return -0.5 * float(v @ v) - 0.3 * float(v[0] * v[1])


@contextmanager
def serve(source: Path) -> Iterator[str]:
    """``kameleon serve`` of the checkout ``source`` on the memory store; its URL."""
    port = free_port()
    argv = [
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, {str(source)!r}); "
        "from kameleon.cli import main; sys.exit(main())",
        "serve",
        "--port",
        str(port),
        "--store",
        "memory",
        "--log-level",
        "warning",
    ]
    env = {"KAMELEON_MAX_ASK": "4096"}
    with running(argv, port, lambda client: client.get("/v1/health/live"), env):
        yield f"http://127.0.0.1:{port}"


def session_body(algorithm: str, seed: int) -> dict[str, Any]:
    """The session of ``CASES[algorithm]`` with ``seed``."""
    case = CASES[algorithm]
    return {
        "algorithm": algorithm,
        "dim": case["dim"],
        "chains": case["chains"],
        "seed": seed,
        "warmup": case["warmup"],
        "max_iterations": case["warmup"] + case["iterations"],
        "options": case["options"],
    }


def drive(
    url: str, algorithm: str, workers: int, cost: float, seed: int
) -> tuple[float, int, bytes]:
    """One run: wall seconds, evaluations, the draws (NPY bytes)."""
    body = session_body(algorithm, seed)
    evaluations = widest = 0
    with httpx.Client(base_url=url, timeout=120) as client, ThreadPoolExecutor(workers) as pool:
        sid = client.post("/v1/sessions", json=body).json()["id"]
        start = time.perf_counter()
        answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": workers}).json()
        while answer["proposals"] or not answer["done"]:
            proposals = answer["proposals"]
            widest = max(widest, len(proposals))
            values = list(pool.map(lambda p: logdensity(p["x"], cost), proposals))
            evaluations += len(proposals)
            results = [
                {"id": p["id"], "log_density": v} for p, v in zip(proposals, values, strict=True)
            ]
            answer = client.post(
                f"/v1/sessions/{sid}/step", json={"results": results, "max": workers}
            ).json()
        wall = time.perf_counter() - start
        draws = client.get(f"/v1/sessions/{sid}/draws?format=npy").content
    return wall, evaluations, draws, widest


def drive_independent(
    url: str, algorithm: str, workers: int, cost: float, seed: int
) -> tuple[float, int, bytes, int]:
    """As :func:`drive`, but ``workers`` threads each ask for one point, evaluate it and
    step with it (asking for one more), as independent worker processes do; an ask with
    nothing to hand out waits for a point (a long poll)."""
    body = session_body(algorithm, seed)
    counts = [0] * workers
    with httpx.Client(base_url=url, timeout=120) as client:
        sid = client.post("/v1/sessions", json=body).json()["id"]

    def work(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as mine:
            answer = mine.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()
            while not answer["done"]:
                if not answer["proposals"]:
                    ask = {"max": 1, "wait_seconds": 1}
                    answer = mine.post(f"/v1/sessions/{sid}/ask", json=ask).json()
                    continue
                (p,) = answer["proposals"]
                result = {"id": p["id"], "log_density": logdensity(p["x"], cost)}
                counts[k] += 1
                step = {"results": [result], "max": 1}
                answer = mine.post(f"/v1/sessions/{sid}/step", json=step).json()

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, range(workers)))
    wall = time.perf_counter() - start
    with httpx.Client(base_url=url, timeout=120) as client:
        draws = client.get(f"/v1/sessions/{sid}/draws?format=npy").content
    return wall, sum(counts), draws, 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a checkout to compare with")
    parser.add_argument("--algorithms", default="smc,ensemble,tempering")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cost", type=float, default=0.005, help="seconds per evaluation")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--independent",
        action="store_true",
        help="workers that each ask for one point at a time, instead of one asking for all",
    )
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    sources = {"rounds": here} | ({"before": args.before.resolve()} if args.before else {})
    table: dict[str, Any] = {
        "workers": args.workers,
        "cost": args.cost,
        "independent": args.independent,
        "results": {},
    }
    for algorithm in args.algorithms.split(","):
        runs: dict[str, list[tuple[float, int, bytes, int]]] = {name: [] for name in sources}
        for repeat in range(args.repeats):
            for name, source in sources.items():  # side by side, alternating
                with serve(source) as url:
                    run = drive_independent if args.independent else drive
                    runs[name].append(run(url, algorithm, args.workers, args.cost, 11 + repeat))
        row: dict[str, Any] = {}
        for name, measured in runs.items():
            rates = [run[1] / run[0] for run in measured]
            row[name] = {
                "evaluations": measured[0][1],
                "widest_answer": max(run[3] for run in measured),
                "median_wall_seconds": statistics.median(run[0] for run in measured),
                "median_evaluations_per_second": statistics.median(rates),
            }
        if "before" in runs:
            same = all(
                np.load(io.BytesIO(a[2])).tobytes() == np.load(io.BytesIO(b[2])).tobytes()
                for a, b in zip(runs["rounds"], runs["before"], strict=True)
            )
            row["same_draws"] = same
            row["speedup"] = (
                row["rounds"]["median_evaluations_per_second"]
                / row["before"]["median_evaluations_per_second"]
            )
        table["results"][algorithm] = row
        print(algorithm, json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
