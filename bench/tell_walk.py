"""The walk of one ``tell`` through the service: which of the project's files and
functions one told result passes through, in the order they are first entered.

Run from the repository root (or with another checkout first on ``PYTHONPATH``, to walk
that checkout's code):

    .venv/bin/python bench/tell_walk.py [--store memory|redis] [--algorithm rwm] [--chains 1] [--told 1]

A session is made, warmed past its first transitions, and one proposal asked; then the
tell of that one result is traced with :func:`sys.setprofile`. Every call of a function
defined under ``core/``, ``service/`` or ``kameleon/`` is recorded (comprehensions and
lambdas are left out: they are part of the function that holds them). The output gives
the files and functions counted, and the tree of first calls, indented by depth, each
function shown once under the caller that entered it first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import httpx

ANONYMOUS = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>", "<module>"}


@dataclass
class Walk:
    """The project's functions entered, in the order of their first call."""

    roots: tuple[str, ...]
    order: list[tuple[int, str, str]] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)
    calls: int = 0
    depth: int = 0

    def where(self, frame: FrameType) -> str | None:
        path = os.path.realpath(frame.f_code.co_filename)
        for root in self.roots:
            if path.startswith(root + os.sep):
                return os.path.relpath(path, os.path.dirname(root))
        return None

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        name = frame.f_code.co_name
        if name in ANONYMOUS or self.where(frame) is None:
            return
        if event == "return":
            self.depth -= 1
            return
        self.calls += 1
        where = self.where(frame)
        assert where is not None
        key = (where, frame.f_code.co_qualname)
        if key not in self.seen:
            self.seen.add(key)
            self.order.append((self.depth, where, frame.f_code.co_qualname))
        self.depth += 1


@contextmanager
def tracing(walk: Walk) -> Iterator[None]:
    sys.setprofile(walk.profile)
    try:
        yield
    finally:
        sys.setprofile(None)


def _log_density(x: list[float]) -> float:
    return -0.5 * sum(v * v for v in x)


async def _walk(args: argparse.Namespace) -> dict[str, Any]:
    from kameleon.service.app import create_app
    from kameleon.service.config import Settings

    settings: dict[str, Any] = {"store": args.store}
    if args.store == "redis":
        settings["redis_url"] = args.redis_url
        settings["redis_prefix"] = f"kameleon-walk-{uuid.uuid4().hex[:8]}"
    app = create_app(Settings(**settings))
    roots = tuple(os.path.realpath(os.path.join(os.getcwd(), name)) for name in ("core", "service"))
    import kameleon

    roots += (os.path.realpath(os.path.dirname(kameleon.__file__)),)
    roots = tuple(dict.fromkeys(roots))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://walk") as api:
            made = await api.post(
                "/v1/sessions",
                json={
                    "algorithm": args.algorithm,
                    "dim": args.dim,
                    "chains": args.chains,
                    "warmup": 100,
                    "max_iterations": 1000,
                    "seed": 1,
                },
            )
            made.raise_for_status()
            sid = made.json()["id"]
            base = f"/v1/sessions/{sid}"
            try:
                results: list[dict[str, Any]] = []
                for _ in range(args.before):
                    answer = await api.post(
                        f"{base}/step", json={"results": results, "max": args.chains}
                    )
                    answer.raise_for_status()
                    results = [
                        {"id": p["id"], "log_density": _log_density(p["x"])}
                        for p in answer.json()["proposals"]
                    ]
                told = results[: args.told]
                walk = Walk(roots)
                with tracing(walk):
                    answer = await api.post(f"{base}/tell", json={"results": told})
                answer.raise_for_status()
                outcome = answer.json()
            finally:
                await api.delete(base)
    files = sorted({where for _, where, _ in walk.order})
    return {
        "store": args.store,
        "algorithm": args.algorithm,
        "chains": args.chains,
        "told": len(told),
        "outcome": outcome,
        "files": len(files),
        "functions": len(walk.order),
        "calls": walk.calls,
        "file_list": files,
        "tree": [f"{'  ' * depth}{where}:{name}" for depth, where, name in walk.order],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("memory", "redis"), default="memory")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--algorithm", default="rwm")
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--chains", type=int, default=1)
    parser.add_argument("--before", type=int, default=20, help="steps taken before the traced tell")
    parser.add_argument("--told", type=int, default=1, help="results in the traced tell")
    parser.add_argument("--json", action="store_true", help="print the walk as JSON")
    args = parser.parse_args()
    walk = asyncio.run(_walk(args))
    if args.json:
        print(json.dumps(walk, indent=1))
        return
    print(
        f"{walk['store']} store, {walk['algorithm']}, {walk['chains']} chain(s), "
        f"{walk['told']} told: "
        f"{walk['files']} files, {walk['functions']} functions, {walk['calls']} calls"
    )
    print("answer:", json.dumps(walk["outcome"]))
    for line in walk["tree"]:
        print(line)


if __name__ == "__main__":
    main()
