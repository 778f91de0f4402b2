"""Does the service keep memory it should give back? A soak of one service process.

Run from the repository root (starts its own ``kameleon serve`` on the memory store):

    .venv/bin/python bench/memory_soak.py [--cycles 6] [--sessions 20] [--steps 200]
        [--env NAME=VALUE ...] [--compare]

Each cycle creates ``--sessions`` sessions (kameleon, d = 8, 8 chains, so each chain
keeps a kernel subsample), steps each ``--steps`` times with every chain's proposal told,
reads its diagnostics and draws, and deletes it. The resident size (RSS) of the service
is printed after the creates and steps, and ``--settle`` seconds after the deletes,
every cycle: a leak shows
as an RSS after deletes that grows cycle after cycle; memory the allocator keeps for
reuse shows as a plateau.

``--env`` sets the service's environment (repeatable, e.g. ``--env MALLOC_ARENA_MAX=2``).
``--compare`` runs the soak once per configuration of :data:`CONFIGURATIONS`, one after
the other (each with ``--env`` too), and ends with one table of them all.
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

#: What ``--compare`` runs: glibc's allocator as it comes, with two arenas, and with the
#: service's ``malloc_trim`` after deletes (``KAMELEON_MALLOC_TRIM``).
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "no trim": {"KAMELEON_MALLOC_TRIM": "false"},
    "no trim, MALLOC_ARENA_MAX=2": {"KAMELEON_MALLOC_TRIM": "false", "MALLOC_ARENA_MAX": "2"},
    "malloc_trim": {"KAMELEON_MALLOC_TRIM": "true"},
}


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


def soak(
    env: dict[str, str], cycles: int, sessions: int, steps: int, settle: float
) -> list[tuple[float, float]]:
    """RSS with the sessions and after their deletes, per cycle; the first pair is the
    RSS at start (twice)."""
    port = free_port()
    argv = [KAMELEON, "serve", "--port", str(port)]
    with serving(argv, env, port) as url, httpx.Client(base_url=url, timeout=60) as client:
        pid = next(
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and p.info["cmdline"][-3:] == argv[-3:]
        )
        start = rss_mb(pid)
        print(f"started: {start:.0f} MB", flush=True)
        print("cycle | RSS with sessions (MB) | RSS after deletes (MB) | seconds", flush=True)
        rows = [(start, start)]
        for k in range(cycles):
            started = time.monotonic()
            sids = cycle(client, sessions, steps)
            full = rss_mb(pid)
            for sid in sids:
                client.delete(f"/v1/sessions/{sid}")
            time.sleep(settle)  # the service trims at most every 5 s: let the last one run
            after = rss_mb(pid)
            rows.append((full, after))
            print(
                f"{k + 1} | {full:.0f} | {after:.0f} | {time.monotonic() - started:.0f}", flush=True
            )
    return rows


def env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--env", type=env_pair, action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--settle", type=float, default=6.0, help="seconds from the deletes to the RSS after"
    )
    parser.add_argument(
        "--compare", action="store_true", help="soak each of the CONFIGURATIONS in turn"
    )
    args = parser.parse_args()
    extra = dict(args.env)
    configurations = CONFIGURATIONS if args.compare else {"this run": {}}
    results: dict[str, list[tuple[float, float]]] = {}
    for name, env in configurations.items():
        print(f"\n## {name}", flush=True)
        results[name] = soak({**env, **extra}, args.cycles, args.sessions, args.steps, args.settle)
    print("\nRSS in MB, with the sessions / after their deletes:\n")
    print("| cycle | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for i in range(args.cycles + 1):
        cells = [
            f"{rows[i][1]:.0f}" if i == 0 else f"{rows[i][0]:.0f} / {rows[i][1]:.0f}"
            for rows in results.values()
        ]
        print(f"| {i or 'start'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
