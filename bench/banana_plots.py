"""Trace and pair plots of every sampler on the banana B(0.03, 100), d = 8, in process.

    .venv/bin/python bench/banana_plots.py [--chains 4] [--warmup 5000] [--iterations 20000] \
        [--seed 1] [--out bench/results/banana-trace-pair.png]

Chains from ``kameleon.sample``'s default starting points (uniform in ``(-2, 2)^8``),
default options, as section 6 of ``BENCHMARKS.md``. One column per sampler: above, the
trace of ``x1`` after warm-up, every chain; below, the pooled post-warm-up draws of
``(x1, x2)`` (thinned to 2 000) over exact draws of the banana (grey). Beside the
figure, a JSON file (the same name, ``.json``) with each sampler's sd of ``x1`` and
``x2`` (truth 10 and 4.36), the share of draws with ``|x1| > 15`` (truth 0.134), the
mean quantile-coverage error of the pooled draws, max R-hat, min bulk ESS and seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core.diagnostics.summary import ess_bulk, per_parameter, rhat
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.validation.targets import Banana, quantile_error

BANANA = Banana(8, b=0.03, v=100.0)
ALGORITHMS = ("rwm", "am", "kameleon", "kmc-lite", "kmc-finite")
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/banana-trace-pair.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algorithms = args.algorithms.split(",")
    exact = BANANA.sample(4000, np.random.default_rng(0))
    fig, axes = plt.subplots(
        2, len(algorithms), figsize=(3.2 * len(algorithms), 6.4), squeeze=False
    )
    rows = []
    for column, algorithm in enumerate(algorithms):
        started = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = sample_chains(
                BANANA.logdensity,
                BANANA.dim,
                algorithm=algorithm,
                chains=args.chains,
                iterations=args.iterations,
                warmup=args.warmup,
                seed=args.seed,
                warn=False,
            )
        seconds = time.perf_counter() - started
        draws = np.stack([r.draws[args.warmup :] for r in results])
        flat = draws.reshape(-1, BANANA.dim)
        row = {
            "algorithm": algorithm,
            "chains": args.chains,
            "warmup": args.warmup,
            "iterations": args.iterations,
            "seed": args.seed,
            "sd_x1": round(float(flat[:, 0].std()), 3),
            "sd_x2": round(float(flat[:, 1].std()), 3),
            "tail": round(float(np.mean(np.abs(flat[:, 0]) > 15.0)), 4),
            "qerr": round(quantile_error(BANANA.quantile_coverage(flat)), 4),
            "max_rhat": round(float(np.max(per_parameter(rhat, draws))), 3),
            "min_ess_bulk": round(float(np.min(per_parameter(ess_bulk, draws))), 1),
            "seconds": round(seconds, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)

        trace, pair = axes[0, column], axes[1, column]
        step = max(1, args.iterations // 2000)
        for chain in draws:
            trace.plot(np.arange(0, args.iterations, step), chain[::step, 0], lw=0.4)
        trace.set(title=algorithm, xlabel="iteration after warm-up", ylim=(-45, 45))
        pair.scatter(exact[:, 0], exact[:, 1], s=1, c="lightgrey", rasterized=True)
        thinned = flat[:: max(1, math.ceil(len(flat) / 2000))]
        pair.scatter(thinned[:, 0], thinned[:, 1], s=1, c="tab:red", rasterized=True)
        pair.set(
            xlabel="x1", xlim=(-45, 45), ylim=(-15, 50),
            title=f"sd x2 {row['sd_x2']:.2f} (4.36), q-err {row['qerr']:.3f}",
        )  # fmt: skip
    axes[0, 0].set_ylabel("x1")
    axes[1, 0].set_ylabel("x2")
    fig.suptitle(
        f"B(0.03, 100), d = 8, in process: {args.chains} chains x {args.iterations} after "
        f"{args.warmup} warm-up, default options, seed {args.seed} (grey: exact draws)"
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
