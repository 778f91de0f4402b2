"""The kernel samplers against Adaptive Metropolis at a short warm-up, default options.

    .venv/bin/python bench/kernels_bench.py [--seeds 1,2,3] [--chains 4] [--warmup 5000] \
        [--iterations 5000] [--algorithms am,kameleon,kmc-lite,kmc-finite] [--target NAME ...] \
        [--options JSON]

Targets: in d = 8, a Gaussian with standard deviations 0.1..10 along axes rotated by a
random orthogonal matrix, the bananas B(0.03, 100) and B(0.1, 100) and the flower
F(10, 6, 6, 1); in d = 9,
a Gaussian centred away from the chains' start (:func:`offset_gaussian`). For each
target and sampler, ``--chains`` chains from the origin, in process (``kameleon.sample``'s
runner), one run per seed; the table gives the median over the seeds of the minimum bulk
ESS per 1000 density evaluations (warm-up included in the evaluations), of the maximum
R-hat, of the mean quantile-coverage error (each chain's coverage of the exact quantiles at
levels 0.1..0.9 averaged over the chains, then the mean of ``|coverage - q|``, as the
papers compute it), and, on the bananas, of the standard deviation of x2 (its truth,
``sqrt(1 + 2 b^2 v^2)``, beside it: 4.36 for B(0.03, 100), 14.18 for B(0.1, 100)). BENCHMARKS.md
("Kernel samplers after the preconditioner learns through warm-up") has the last table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core.diagnostics.summary import ess_bulk, per_parameter, rhat
from kameleon.core.running.inprocess import sample
from kameleon.core.validation.targets import Banana, Flower, Gaussian, quantile_error


def rotated_gaussian(dim: int = 8, seed: int = 17) -> Gaussian:
    """Standard deviations 0.1..10 (geometric), principal axes rotated at random."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    covariance = q @ np.diag(np.geomspace(0.1, 10.0, dim) ** 2) @ q.T
    return Gaussian(np.zeros(dim), 0.5 * (covariance + covariance.T))


def offset_gaussian(dim: int = 9) -> Gaussian:
    """Standard deviations 0.6..1.5 along the axes, centred at 2.5 in every coordinate:
    chains from the origin start 1.7 to 4 standard deviations out, as on the Glass
    GP classification (section 13)."""
    return Gaussian(np.full(dim, 2.5), np.diag(np.linspace(0.6, 1.5, dim) ** 2))


TARGETS: dict[str, Any] = {
    "rotated-gaussian-8d": rotated_gaussian(),
    "offset-gaussian-9d": offset_gaussian(),
    "banana-B(0.03,100)-8d": Banana(8, b=0.03, v=100.0),
    "banana-B(0.1,100)-8d": Banana(8, b=0.1, v=100.0),
    "flower-F(10,6,6,1)-8d": Flower(8),
}
ALGORITHMS = ("am", "kameleon", "kmc-lite", "kmc-finite")


def run(
    target_name: str,
    algorithm: str,
    *,
    seed: int,
    chains: int,
    warmup: int,
    iterations: int,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    target = TARGETS[target_name]
    started = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        draws = sample(
            target.logdensity,
            target.dim,
            algorithm=algorithm,
            chains=chains,
            warmup=warmup,
            iterations=iterations,
            seed=seed,
            initial=np.zeros(target.dim),
            options=options or None,
            warn=False,
        )
    evaluations = chains * (warmup + iterations)
    flat = draws.reshape(-1, target.dim)
    return {
        "target": target_name,
        "algorithm": algorithm,
        "seed": seed,
        **({"options": options} if options else {}),
        "min_ess_per_1000": float(np.min(per_parameter(ess_bulk, draws))) / evaluations * 1000,
        "max_rhat": float(np.max(per_parameter(rhat, draws))),
        "sd_x2": float(flat[:, 1].std()),
        "quantile_error": quantile_error(np.mean([target.quantile_coverage(c) for c in draws], 0)),
        "seconds": round(time.perf_counter() - started, 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per (target, sampler), medians over the seeds."""
    lines = [
        "| target | sampler | min bulk ESS / 1000 evals | max R-hat | quantile error | sd of x2 (truth) |",
        "|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["target"], r["algorithm"]) for r in rows))
    for target, algorithm in keys:
        group = [r for r in rows if r["target"] == target and r["algorithm"] == algorithm]
        ess = float(np.median([r["min_ess_per_1000"] for r in group]))
        rh = float(np.median([r["max_rhat"] for r in group]))
        sd = ""
        if isinstance(TARGETS[target], Banana):
            truth = float(np.sqrt(TARGETS[target].variance[1]))
            sd = f"{float(np.median([r['sd_x2'] for r in group])):.2f} ({truth:.2f})"
        qe = float(np.median([r["quantile_error"] for r in group]))
        lines.append(f"| {target} | {algorithm} | {ess:.2f} | {rh:.3f} | {qe:.4f} | {sd} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=5000, help="post-warm-up, per chain")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--target", action="append", default=[], help="repeat for several")
    parser.add_argument(
        "--options",
        default="{}",
        help="options (JSON) given to every sampler but am, e.g. '{\"bandwidth\": 10}'",
    )
    parser.add_argument("--out", default=None, help="also write the rows as JSON lines here")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    rows = []
    for target_name in args.target or list(TARGETS):
        for algorithm in args.algorithms.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                row = run(
                    target_name,
                    algorithm,
                    seed=seed,
                    chains=args.chains,
                    warmup=args.warmup,
                    iterations=args.iterations,
                    options=None if algorithm == "am" else options,
                )
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
