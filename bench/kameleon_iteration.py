"""Time of one KAMH iteration (ask + tell), in process, post-warm-up.

    .venv/bin/python bench/kameleon_iteration.py [--n 1000] [--dim 8]

The chain runs its warm-up on B(0.03, 100) until the subsample is full, then the
median over repeats of the time of ``ask`` + ``tell`` (the density is not timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core import SAMPLERS
from kameleon.core.validation.targets import Banana


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--algorithm", default="kameleon")
    args = parser.parse_args()
    target = Banana(dim=args.dim, b=0.03, v=100.0)
    sampler = SAMPLERS[args.algorithm]
    options = {"subsample_size": args.n} if args.algorithm == "kameleon" else {}
    warmup = 2 * args.n if args.algorithm == "kameleon" else 2000
    params = sampler.make_params(args.dim, options, warmup=warmup)
    state = sampler.init(np.zeros(args.dim), params, seed=1, chain=0)
    proposal = sampler.ask(state, params)
    state, _ = sampler.tell(state, params, proposal, target.logdensity(proposal.position))
    for _ in range(warmup):
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, target.logdensity(proposal.position))
    times = []
    for _ in range(args.iterations):
        started = time.perf_counter()
        proposal = sampler.ask(state, params)
        asked = time.perf_counter()
        value = target.logdensity(proposal.position)
        resumed = time.perf_counter()
        state, _ = sampler.tell(state, params, proposal, value)
        times.append((asked - started) + (time.perf_counter() - resumed))
    print(
        f"{args.algorithm} n={args.n} d={args.dim}: median ask+tell {statistics.median(times) * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
