"""Is a kernel sampler's transition, frozen after warm-up, invariant on the banana?

    .venv/bin/python bench/kernel_invariance.py --algorithm kmc-lite [--seed 1] \
        [--warmup 5000] [--clones 1000] [--transitions 200] [--options JSON]

One chain of ``--algorithm`` on B(0.03, 100) in d = 8 runs its warm-up (default options
unless ``--options``), after which its surrogate, subsample, scales and preconditioner
are frozen (``"warmup"`` adaptation). That state is then cloned ``--clones`` times, each
clone started at an exact draw of the banana (Gaussian, then twisted) with its own
random streams (its own chain id), and run ``--transitions`` transitions. If the frozen
transition leaves the banana invariant, the clones stay exact draws: the standardised
coordinates ``u = (y1 / 10, y2 - b (y1^2 - v), y3, ...)`` stay independent standard
normals, whatever the number of transitions. The script prints, at a few transition
counts, the Kolmogorov-Smirnov distance (and p-value) of ``u1``, ``u2`` and of
``||u||^2`` against ``N(0, 1)`` and ``chi2_8``, the standard deviations of ``y1`` and
``y2`` (truth 10 and 4.36) and the mean quantile-coverage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import frozen_array
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.validation.targets import Banana, quantile_error

BANANA = Banana(8, b=0.03, v=100.0)


def frozen_state(algorithm: str, *, seed: int, warmup: int, options: dict[str, Any]) -> Any:
    """The state of one chain after its warm-up (and one more transition)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        (result,) = sample_chains(
            BANANA.logdensity,
            BANANA.dim,
            algorithm=algorithm,
            chains=1,
            iterations=1,
            warmup=warmup,
            seed=seed,
            options=options,
            warn=False,
        )
    return result.state


def clones(state: Any, n: int, rng: np.random.Generator) -> list[Any]:
    """``n`` copies of ``state`` at exact draws of the banana, chain ids 1000 on."""
    starts = BANANA.sample(n, rng)
    return [
        dataclasses.replace(
            state,
            position=frozen_array(y),
            logdensity=BANANA.logdensity(y),
            chain=1000 + i,
        )
        for i, y in enumerate(starts)
    ]


def summary(points: np.ndarray) -> dict[str, float]:
    u = BANANA.standardise(points)
    return {
        "ks_u1": float(stats.kstest(u[:, 0], "norm").statistic),
        "p_u1": float(stats.kstest(u[:, 0], "norm").pvalue),
        "ks_u2": float(stats.kstest(u[:, 1], "norm").statistic),
        "p_u2": float(stats.kstest(u[:, 1], "norm").pvalue),
        "ks_r2": float(stats.kstest((u**2).sum(1), "chi2", args=(BANANA.dim,)).statistic),
        "p_r2": float(stats.kstest((u**2).sum(1), "chi2", args=(BANANA.dim,)).pvalue),
        "mean_u1": float(u[:, 0].mean()),
        "mean_u2": float(u[:, 1].mean()),
        "sd_u2": float(u[:, 1].std()),
        "sd_y1": float(points[:, 0].std()),
        "sd_y2": float(points[:, 1].std()),
        "qerr": quantile_error(BANANA.quantile_coverage(points)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="kmc-lite")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--clones", type=int, default=1000)
    parser.add_argument("--transitions", type=int, default=200)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--checkpoints", default="0,10,50,100,200")
    args = parser.parse_args()
    sampler = SAMPLERS[args.algorithm]
    options = json.loads(args.options)
    started = time.perf_counter()
    state = frozen_state(args.algorithm, seed=args.seed, warmup=args.warmup, options=options)
    params = sampler.make_params(BANANA.dim, options, warmup=args.warmup)
    print(f"warm-up done in {time.perf_counter() - started:.1f} s", flush=True)
    states = clones(state, args.clones, np.random.default_rng(args.seed))
    checkpoints = {int(c) for c in args.checkpoints.split(",")}
    accepted = 0
    with np.errstate(all="ignore"):
        for t in range(args.transitions + 1):
            if t in checkpoints:
                row = summary(np.array([s.position for s in states]))
                acc = accepted / max(1, t * len(states))
                print(
                    json.dumps(
                        {"transitions": t, "acceptance": round(acc, 3)}
                        | {k: round(v, 4) for k, v in row.items()}
                    ),
                    flush=True,
                )
            if t == args.transitions:
                break
            for i, s in enumerate(states):
                proposal = sampler.ask(s, params)
                new, info = sampler.tell(s, params, proposal, BANANA.logdensity(proposal.position))
                accepted += info.outcome == "accepted"
                states[i] = new
    print(f"done in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
