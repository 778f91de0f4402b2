"""The CPU time of a kernel sampler's scouting transitions (the warm-up's first half,
where the preconditioner is learnt), per transition, in process.

Run from the repository root, or with another checkout first on ``PYTHONPATH`` to
measure that checkout (the two side by side, alternating, is the comparison this is for):

    .venv/bin/python bench/scouting_step.py [--dims 4 8 20 40] [--algorithm kmc-lite]
    PYTHONPATH=<checkout> .venv/bin/python bench/scouting_step.py ...

For each dimension ``d``: a Gaussian with standard deviations ``1e-2..1e2`` (geometric)
along axes rotated at random, chains started as the service starts them, ``warmup``
5 000 (2 500 scouting transitions). Each repeat runs one chain's ``ask``/``tell`` through
scouting and divides the thread's CPU time (``time.thread_time``: little moved by the
other work of a shared machine) by the transitions; the log density's own time is
included and the same on both sides. Prints one JSON line per dimension: the median and
the least over the repeats, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def measure(algorithm: str, dim: int, repeats: int, warmup: int) -> dict[str, object]:
    from kameleon.core import SAMPLERS
    from kameleon.core.running.initial import initial_point

    q, _ = np.linalg.qr(np.random.default_rng(dim).standard_normal((dim, dim)))
    sd = np.logspace(-2, 2, dim)
    precision = q @ np.diag(sd**-2) @ q.T

    def logdensity(x: np.ndarray) -> float:
        d = x - 0.5
        return float(-0.5 * d @ precision @ d)

    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(dim, {}, warmup=warmup)
    scouting = warmup // 2
    per_step: list[float] = []
    for chain in range(repeats):
        state = sampler.init(
            initial_point(dim, seed=1, chain=chain, attempt=0), params, seed=1, chain=chain
        )
        start = time.thread_time()
        while state.iteration < scouting:
            proposal = sampler.ask(state, params)
            state, _ = sampler.tell(state, params, proposal, logdensity(proposal.position))
        per_step.append((time.thread_time() - start) / scouting * 1e6)
    return {
        "algorithm": algorithm,
        "dim": dim,
        "median_us": round(statistics.median(per_step), 1),
        "least_us": round(min(per_step), 1),
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[4, 8, 20, 40])
    parser.add_argument("--algorithm", default="kmc-lite")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5000)
    args = parser.parse_args()
    for dim in args.dims:
        print(json.dumps(measure(args.algorithm, dim, args.repeats, args.warmup)), flush=True)


if __name__ == "__main__":
    main()
