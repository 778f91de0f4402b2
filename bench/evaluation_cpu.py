"""A sampler's own CPU time per evaluation, in process (no service, no store).

Run from the repository root, or with another checkout first on ``PYTHONPATH`` to
measure that checkout (the two side by side, alternating, is the comparison this is for):

    .venv/bin/python bench/evaluation_cpu.py hmc [nuts mala ...] [--dim 8] [--iterations 400]
    PYTHONPATH=<checkout> .venv/bin/python bench/evaluation_cpu.py hmc ...

Each of ``--repeats`` chains (default 5) runs ``ask`` and ``tell`` (``tell_gradient`` for a
sampler that needs the gradient) on a standard normal in ``--dim`` dimensions, started at
0.1 in every coordinate, until ``--iterations`` transitions (half warm-up); the thread's
CPU time (``time.thread_time``) is divided by the evaluations. Prints one JSON line per
sampler: the median and the least over the chains, in microseconds, and the sum of the
final positions, which is the same on both sides when a change keeps the draws.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np


def measure(name: str, dim: int, iterations: int, repeats: int) -> dict[str, Any]:
    from kameleon.core import SAMPLERS

    sampler = SAMPLERS[name]
    params = sampler.make_params(dim, {}, warmup=iterations // 2)
    gradient = sampler.evaluation.gradient
    per_evaluation: list[float] = []
    checksum = 0.0
    for chain in range(repeats):
        state = sampler.init(np.full(dim, 0.1), params, seed=1, chain=chain)
        evaluations = 0
        start = time.thread_time()
        while state.iteration < iterations:
            proposal = sampler.ask(state, params)
            x = proposal.position
            value = float(-0.5 * x @ x)
            if gradient:
                assert sampler.tell_gradient is not None
                state, _ = sampler.tell_gradient(state, params, proposal, value, -x)
            else:
                state, _ = sampler.tell(state, params, proposal, value)
            evaluations += 1
        per_evaluation.append((time.thread_time() - start) / evaluations * 1e6)
        checksum += float(np.sum(state.position))
    return {
        "algorithm": name,
        "dim": dim,
        "median_us": round(statistics.median(per_evaluation), 1),
        "least_us": round(min(per_evaluation), 1),
        "checksum": checksum,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithms", nargs="+")
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name in args.algorithms:
        print(json.dumps(measure(name, args.dim, args.iterations, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
