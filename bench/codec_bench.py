"""The cost of writing a chain's state: each state encoded alone, against each encoded
over its predecessor (what the service does: the encodings of the objects a transition
left untouched are kept, ``core.interface.documents.encode(..., memo=, kept=)``).

For each sampler and dimension: a chain run in process for ``--evaluations`` told results
(50 warm-up transitions) on a standard normal, the states after its last 300 kept; both ways of encoding them timed in
turn, ``--repeats`` times; the median microseconds per state of each, and their ratio.
A NUTS state is written at every leapfrog point, so it is the case that matters.

    .venv/bin/python bench/codec_bench.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kameleon.core import SAMPLERS
from kameleon.core.interface.codec import Memo
from kameleon.core.interface.documents import encode


def states(algorithm: str, dim: int, evaluations: int) -> list[Any]:
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(dim, {}, warmup=50)
    state = sampler.init(np.full(dim, 0.5), params, seed=1, chain=0)
    out = []
    for _ in range(evaluations):
        proposal = sampler.ask(state, params)
        x = proposal.position
        value = -0.5 * float(x @ x)
        if sampler.evaluation.gradient:
            state, _ = sampler.tell_gradient(state, params, proposal, value, -x)
        else:
            state, _ = sampler.tell(state, params, proposal, value)
        out.append(state)
    return out[-300:]


def alone(kept: list[Any]) -> float:
    started = time.perf_counter()
    for state in kept:
        encode(state, with_cold=False)
    return (time.perf_counter() - started) / len(kept)


def over_predecessor(kept: list[Any]) -> float:
    started = time.perf_counter()
    previous: Memo | None = None
    for state in kept:
        memo: Memo = {}
        encode(state, with_cold=False, memo=memo, kept=previous)
        previous = memo
    return (time.perf_counter() - started) / len(kept)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evaluations", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--output", default="bench/results/codec.json")
    args = parser.parse_args()
    rows = {}
    for algorithm, dim in (("nuts", 8), ("nuts", 100), ("am", 8), ("kameleon", 8)):
        kept = states(algorithm, dim, args.evaluations)
        a, b = [], []
        for _ in range(args.repeats):
            a.append(alone(kept))
            b.append(over_predecessor(kept))
        row = {
            "alone_us": statistics.median(a) * 1e6,
            "over_predecessor_us": statistics.median(b) * 1e6,
        }
        row["ratio"] = row["over_predecessor_us"] / row["alone_us"]
        rows[f"{algorithm}/d{dim}"] = row
        print(f"{algorithm}/d{dim}", {k: round(v, 2) for k, v in row.items()}, flush=True)
    out = {"python": sys.version.split()[0], "rows": rows}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
