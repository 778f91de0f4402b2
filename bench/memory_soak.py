"""Does the service keep memory it should give back? A soak of one service process.

Run from the repository root (starts its own ``kameleon serve`` on the memory store):

    .venv/bin/python bench/memory_soak.py [--cycles 6] [--sessions 20] [--steps 200]

Each cycle creates ``--sessions`` sessions (kameleon, d = 8, 8 chains, so each chain
keeps a kernel subsample), steps each ``--steps`` times with every chain's proposal told,
reads its diagnostics and draws, and deletes it. The resident size (RSS) of the service
is printed after the creates and steps, and after the deletes, every cycle: a leak shows
as an RSS after deletes that grows cycle after cycle; memory the allocator keeps for
reuse shows as a plateau.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.servers import KAMELEON, free_port, serving  # noqa: E402


def rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def cycle(client: httpx.Client, sessions: int, steps: int) -> list[str]:
    body = {"algorithm": "kameleon", "dim": 8, "chains": 8, "seed": 1, "warmup": 100}
    sids = [client.post("/v1/sessions", json=body).json()["id"] for _ in range(sessions)]
    for sid in sids:
        answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()
        for _ in range(steps):
            results = [
                {"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])}
                for p in answer["proposals"]
            ]
            answer = client.post(f"/v1/sessions/{sid}/step", json={"results": results}).json()
        client.get(f"/v1/sessions/{sid}/diagnostics")
        client.get(f"/v1/sessions/{sid}/draws")
    return sids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    port = free_port()
    argv = [KAMELEON, "serve", "--port", str(port)]
    with serving(argv, {}, port) as url, httpx.Client(base_url=url, timeout=60) as client:
        pid = next(
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and p.info["cmdline"][-3:] == argv[-3:]
        )
        print(f"started: {rss_mb(pid):.0f} MB")
        print("cycle | RSS with sessions (MB) | RSS after deletes (MB) | seconds")
        for k in range(args.cycles):
            started = time.monotonic()
            sids = cycle(client, args.sessions, args.steps)
            full = rss_mb(pid)
            for sid in sids:
                client.delete(f"/v1/sessions/{sid}")
            time.sleep(1.0)
            print(f"{k + 1} | {full:.0f} | {rss_mb(pid):.0f} | {time.monotonic() - started:.0f}")


if __name__ == "__main__":
    main()
