"""The service's own CPU time per evaluation of a ``step``, in process.

Run from the repository root, or with another checkout first on ``PYTHONPATH`` to
measure that checkout's service (the two side by side, alternating, is the comparison
this is for):

    .venv/bin/python bench/step_cpu.py rwm:1 rwm:256 am:256 [--steps 80] [--skip 20]
    PYTHONPATH=<checkout> .venv/bin/python bench/step_cpu.py rwm:1 ...

For each ``algorithm:chains`` a session (d = 8, memory store, 100 warm-up
transitions) is stepped by an in-process client (every chain's point told and the next
asked in one ``step``; a standard normal); the thread's CPU time inside
``SessionService.step`` (the decision, the sampler, the store and the hand-out, not
HTTP or JSON) is divided by the chains, per step after the first ``--skip``; and so is
the whole request's inside the app (``request_*``: the route, the body's validation,
the answer's JSON and the middleware too). CPU time,
unlike wall time, is little moved by the other work of a shared machine; the minimum
over the steps is the figure to compare, the median is printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx


async def measure(algorithm: str, chains: int, steps: int, skip: int) -> dict[str, Any]:
    from kameleon.service.app import create_app
    from kameleon.service.config import Settings

    app = create_app(Settings(store="memory", max_ask=4096))
    times: list[float] = []
    async with app.router.lifespan_context(app):
        service = app.state.sessions
        step = service.step

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            answer = await step(*args, **kwargs)
            times.append(time.thread_time() - started)
            return answer

        service.step = timed
        requests: list[float] = []

        async def whole(scope: Any, receive: Any, send: Any) -> None:
            started = time.thread_time()
            await app(scope, receive, send)
            if scope["type"] == "http" and scope["path"].endswith("/step"):
                requests.append(time.thread_time() - started)

        transport = httpx.ASGITransport(app=whole)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as api:
            spec = {"algorithm": algorithm, "dim": 8, "chains": chains, "seed": 1, "warmup": 100}
            sid = (await api.post("/v1/sessions", json=spec)).json()["id"]
            asked = await api.post(f"/v1/sessions/{sid}/ask", json={"max": chains})
            proposals = asked.json()["proposals"]
            for _ in range(steps):
                results = [
                    {"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])}
                    for p in proposals
                ]
                answer = await api.post(
                    f"/v1/sessions/{sid}/step", json={"results": results, "max": chains}
                )
                proposals = answer.json()["proposals"]
    kept = [t / chains * 1e6 for t in times[skip:]]
    whole_request = [t / chains * 1e6 for t in requests[skip:]]
    return {
        "min_us": min(kept),
        "median_us": statistics.median(kept),
        "request_min_us": min(whole_request),
        "request_median_us": statistics.median(whole_request),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", help="algorithm:chains, e.g. rwm:256")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--skip", type=int, default=20)
    args = parser.parse_args()
    out = {}
    for case in args.cases:
        algorithm, chains = case.split(":")
        out[case] = asyncio.run(measure(algorithm, int(chains), args.steps, args.skip))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
