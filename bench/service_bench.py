"""Service benchmarks: the floor, step latency, throughput, and Redis traffic per iteration.

Run from the repository root (a Redis server must be reachable; by default the one at
redis://127.0.0.1:6379/0, keys under a prefix of this run, deleted afterwards):

    .venv/bin/python bench/service_bench.py [--redis-url URL] [--quick]
    .venv/bin/python bench/service_bench.py --per-evaluation [--quick]  # nuts against am

Everything is measured side by side in one run on this machine, with a trivial density
evaluated by the client (a standard normal), over keep-alive HTTP/1.1 on loopback. The
client is a minimal ``http.client`` loop so that it costs as little as possible; its own
time is part of every figure, the floor's included.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import orjson
import redis

ROOT = Path(__file__).resolve().parents[1]
KAMELEON = str(Path(sys.executable).with_name("kameleon"))
JSON_HEADERS = {"content-type": "application/json"}


class Client:
    """A keep-alive HTTP/1.1 client with as little overhead as the standard library allows."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.server_seconds = math.nan

    def post(self, path: str, body: object) -> tuple[int, bytes]:
        self.conn.request("POST", path, orjson.dumps(body), JSON_HEADERS)
        response = self.conn.getresponse()
        #: The service's own time on the last request, in seconds (its Server-Timing).
        self.server_seconds = _server_seconds(response.getheader("server-timing"))
        return response.status, response.read()

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        return response.status, response.read()


def _server_seconds(header: str | None) -> float:
    """``app;dur=<ms>`` of a Server-Timing header, in seconds (NaN without one)."""
    if not header or not header.startswith("app;dur="):
        return math.nan
    return float(header.removeprefix("app;dur=")) / 1e3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(port: int, request: Callable[[Client], tuple[int, bytes]]) -> bool:
    """Whether a server on ``port`` answers ``request`` yet."""
    try:
        request(Client(port))
    except OSError:
        return False
    return True


@contextmanager
def running(
    argv: list[str],
    port: int,
    ready: Callable[[Client], tuple[int, bytes]],
    env: dict[str, str] | None = None,
) -> Iterator[int]:
    """Run ``argv`` (from the repository root) until it answers ``ready``; yield its port;
    stop it."""
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 30
        while not answers(port, ready):
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv} did not answer")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def logp(x: list[float]) -> float:
    return -0.5 * sum(v * v for v in x)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def floor_server() -> Iterator[int]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.floor_app:app",
        "--port",
        str(port),
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    with running(argv, port, lambda client: client.post("/", {})):
        yield port


@contextmanager
def service(store: str, workers: int, redis_url: str, prefix: str) -> Iterator[int]:
    port = free_port()
    env = {
        "KAMELEON_STORE": store,
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": prefix,
        "KAMELEON_WORKERS": str(workers),
        "KAMELEON_PORT": str(port),
        "KAMELEON_MAX_ASK": "4096",
    }
    with running([KAMELEON, "serve"], port, lambda client: client.get("/v1/health"), env):
        yield port


def floor_http(port: int, n: int) -> list[float]:
    client, body = Client(port), {"results": [{"id": "c0.i1", "log_density": -1.0}], "max": 1}
    out = []
    for _ in range(n):
        t = time.perf_counter()
        client.post("/", body)
        out.append(time.perf_counter() - t)
    return out


def floor_redis(url: str, n: int) -> list[float]:
    client = redis.Redis.from_url(url)
    script = client.register_script("return 1")
    script()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        script()
        out.append(time.perf_counter() - t)
    client.close()
    return out


def create(client: Client, algorithm: str, chains: int, dim: int = 8, **extra: object) -> str:
    spec = {"algorithm": algorithm, "dim": dim, "chains": chains, "seed": 1, "warmup": 100, **extra}
    status, raw = client.post("/v1/sessions", spec)
    assert status == 201, raw
    return str(orjson.loads(raw)["id"])


def drive(
    port: int, algorithm: str, chains: int, steps: int, warm: int = 20
) -> tuple[list[float], float]:
    """Step latencies (s) and evaluations per second of one client on one session."""
    client = Client(port)
    sid = create(client, algorithm, chains)
    _, raw = client.post(f"/v1/sessions/{sid}/ask", {"max": chains})
    proposals = orjson.loads(raw)["proposals"]
    latencies, evaluations, started = [], 0, 0.0
    for i in range(warm + steps):
        if i == warm:
            started, evaluations = time.perf_counter(), 0
        results = [{"id": p["id"], "log_density": logp(p["x"])} for p in proposals]
        evaluations += len(results)
        t = time.perf_counter()
        status, raw = client.post(f"/v1/sessions/{sid}/step", {"results": results, "max": chains})
        if i >= warm:
            latencies.append(time.perf_counter() - t)
        assert status == 200, raw
        proposals = orjson.loads(raw)["proposals"]
    return latencies, evaluations / (time.perf_counter() - started)


def per_evaluation(
    port: int, algorithms: tuple[str, ...], chains: int, dim: int, steps: int, warm: int
) -> dict[str, list[float]]:
    """Seconds per evaluation handed out and told, per algorithm: one client, one session
    each, every chain's proposal told and the next asked in each ``step`` (``max =
    chains``), after ``warm`` steps; one figure per block of steps (20 blocks). The
    sessions take turns step by step, so that a slow moment of a shared machine falls on
    all of them alike. The client evaluates a standard normal, with its gradient for a
    gradient sampler. Beside each algorithm's figures (the client's wall time), those
    under ``<algorithm>_service`` are the service's own time (its Server-Timing), which
    leaves out the network and the client's work."""
    client = Client(port)
    sessions, proposals = {}, {}
    for algorithm in algorithms:
        sessions[algorithm] = sid = create(client, algorithm, chains, dim=dim)
        _, raw = client.post(f"/v1/sessions/{sid}/ask", {"max": chains})
        proposals[algorithm] = orjson.loads(raw)["proposals"]
    per_block: dict[str, list[float]] = {a: [] for a in algorithms}
    per_block.update({f"{a}_service": [] for a in algorithms})
    spent = dict.fromkeys(algorithms, 0.0)
    served = dict.fromkeys(algorithms, 0.0)
    told = dict.fromkeys(algorithms, 0)
    block = max(1, steps // 20)
    for i in range(warm + steps):
        if i >= warm and (i - warm) % block == 0:
            for a in algorithms:
                if told[a]:
                    per_block[a].append(spent[a] / told[a])
                    per_block[f"{a}_service"].append(served[a] / told[a])
                spent[a], served[a], told[a] = 0.0, 0.0, 0
        for algorithm in algorithms:
            gradient = algorithm in ("mala", "hmc", "nuts")
            started = time.perf_counter()
            results = []
            for p in proposals[algorithm]:
                r: dict[str, object] = {"id": p["id"], "log_density": logp(p["x"])}
                if gradient:
                    r["gradient"] = [-v for v in p["x"]]
                results.append(r)
            status, raw = client.post(
                f"/v1/sessions/{sessions[algorithm]}/step", {"results": results, "max": chains}
            )
            assert status == 200, raw
            proposals[algorithm] = orjson.loads(raw)["proposals"]
            spent[algorithm] += time.perf_counter() - started
            served[algorithm] += client.server_seconds
            told[algorithm] += len(results)
    return per_block


def per_evaluation_main(redis_url: str, prefix: str, quick: bool, output: str) -> None:
    """``--per-evaluation``: the service's time per evaluation for nuts (each a leapfrog
    point) against a plain step of am, same chains, batch and dim, both stores."""
    q = 0.1 if quick else 1.0
    out: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    figures: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        ports = {
            s: stack.enter_context(service(s, 1, redis_url, prefix)) for s in ("memory", "redis")
        }
        for store, port in ports.items():
            for chains, dim, steps in ((1, 8, 3000), (16, 8, 600), (256, 8, 60), (16, 100, 300)):
                n = max(20, int(steps * q))
                blocks = per_evaluation(port, ("am", "nuts"), chains, dim, n, warm=max(5, n // 5))
                row = {f"{a}_us": statistics.median(b) * 1e6 for a, b in blocks.items()}
                row["ratio"] = row["nuts_us"] / row["am_us"]
                row["service_ratio"] = row["nuts_service_us"] / row["am_service_us"]
                key = f"{store}/{chains}chains/d{dim}"
                figures[key] = row
                print(key, row, flush=True)
    out["per_evaluation_us"] = figures
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(out, indent=2) + "\n")


def _drive_worker(args: tuple[int, str, int, int]) -> float:
    return drive(*args)[1]


def throughput(port: int, algorithm: str, chains: int, steps: int, clients: int) -> float:
    if clients == 1:
        return drive(port, algorithm, chains, steps)[1]
    with mp.get_context("spawn").Pool(clients) as pool:
        return float(sum(pool.map(_drive_worker, [(port, algorithm, chains, steps)] * clients)))


def redis_bytes_per_iteration(
    url: str, prefix: str, algorithm: str, at: list[int], sample: int
) -> dict[int, tuple[float, float]]:
    """Bytes Redis receives (writes) and its memory grows per iteration of one chain,
    measured over ``sample`` steps at each iteration count in ``at``; in process."""
    import asyncio

    from kameleon.service.config import Settings
    from kameleon.service.schemas import SessionCreate, TellResult
    from kameleon.service.sessions import SessionService
    from kameleon.service.store.redis_store import RedisStore

    async def run() -> dict[int, tuple[float, float]]:
        store = RedisStore.from_url(url, prefix=prefix)
        sessions = SessionService(store, Settings())
        info = redis.Redis.from_url(url)
        created = await sessions.create(
            SessionCreate(algorithm=algorithm, dim=8, chains=1, seed=1, warmup=500), ""
        )
        sid = created["id"]
        proposals = (await sessions.ask(sid, "", 1, None))["proposals"]
        out, done = {}, 0

        async def steps(n: int) -> None:
            nonlocal proposals, done
            for _ in range(n):
                results = [
                    TellResult(id=p["id"], log_density=logp(list(p["x"]))) for p in proposals
                ]
                proposals = (await sessions.step(sid, "", results, 1, None))["proposals"]
                done += 1

        for target in at:
            await steps(target - done)
            before_net = info.info("stats")["total_net_input_bytes"]
            before_mem = info.info("memory")["used_memory"]
            await steps(sample)
            net = (info.info("stats")["total_net_input_bytes"] - before_net) / sample
            mem = (info.info("memory")["used_memory"] - before_mem) / sample
            out[target] = (net, mem)
        await store.close()
        info.close()
        return out

    return asyncio.run(run())


def delete_keys(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("KAMELEON_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--output", default=None)
    parser.add_argument(
        "--per-evaluation",
        action="store_true",
        help="only the time per evaluation of nuts against am (default output "
        "bench/results/service-gradients.json)",
    )
    args = parser.parse_args()
    q = 0.1 if args.quick else 1.0
    prefix = f"kameleon-bench-{uuid.uuid4().hex[:8]}"
    if args.per_evaluation:
        try:
            per_evaluation_main(
                args.redis_url,
                prefix,
                args.quick,
                args.output or str(ROOT / "bench" / "results" / "service-gradients.json"),
            )
        finally:
            delete_keys(args.redis_url, prefix)
        return
    args.output = args.output or str(ROOT / "bench" / "results" / "service.json")
    results: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    try:
        with floor_server() as fport:
            http_lat = floor_http(fport, int(5000 * q))
        redis_lat = floor_redis(args.redis_url, int(5000 * q))
        floor = statistics.median(http_lat) + statistics.median(redis_lat)
        results["floor_us"] = {
            "http_p50": statistics.median(http_lat) * 1e6,
            "redis_evalsha_p50": statistics.median(redis_lat) * 1e6,
            "sum": floor * 1e6,
        }
        latency, tput = {}, {}
        with ExitStack() as stack:
            ports = {
                ("memory", 1): stack.enter_context(service("memory", 1, args.redis_url, prefix)),
                ("redis", 1): stack.enter_context(service("redis", 1, args.redis_url, prefix)),
                ("redis", 2): stack.enter_context(service("redis", 2, args.redis_url, prefix)),
            }
            for store in ("memory", "redis"):
                lat, _ = drive(ports[(store, 1)], "rwm", 1, int(3000 * q))
                latency[store] = {
                    "p50_us": statistics.median(lat) * 1e6,
                    "p99_us": percentile(lat, 0.99) * 1e6,
                    "p50_over_floor": statistics.median(lat) / floor,
                }
            for (store, procs), port in ports.items():
                for chains in (1, 16, 256):
                    steps = int({1: 3000, 16: 600, 256: 60}[chains] * q)
                    key = f"{store}/{procs}proc/{chains}chains"
                    tput[key] = throughput(port, "rwm", chains, steps, clients=procs)
            per_algorithm = {}
            for algorithm in ("rwm", "am", "kameleon", "kmc-lite", "kmc-finite"):
                for store in ("memory", "redis"):
                    per_algorithm[f"{algorithm}/{store}"] = throughput(
                        ports[(store, 1)], algorithm, 256, max(5, int(30 * q)), clients=1
                    )
        results["step_latency"] = latency
        results["evals_per_s_rwm"] = tput
        results["evals_per_s_256_chains_by_algorithm"] = per_algorithm
        at = [1000, 100_000] if not args.quick else [1000, 10_000]
        results["redis_bytes_per_iteration"] = {
            algorithm: {
                str(k): {"written": v[0], "memory": v[1]}
                for k, v in redis_bytes_per_iteration(
                    args.redis_url, prefix, algorithm, at, 500
                ).items()
            }
            for algorithm in ("rwm", "kameleon")
        }
    finally:
        delete_keys(args.redis_url, prefix)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
