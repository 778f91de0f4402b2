"""Long runs of a kernel sampler on B(0.03, 100), d = 8, against the exact answers.

    .venv/bin/python bench/kernel_bias.py --algorithm kmc-lite [--seeds 1] [--chains 4] \
        [--warmup 5000] [--iterations 20000] [--options JSON] [--prefixes 5000,10000,20000]

In process, chains from ``kameleon.sample``'s default starting points (uniform in
``(-2, 2)^8``), as the issue's run. For each seed and each prefix of the post-warm-up
draws it prints (JSON lines): the maximum R-hat, the minimum bulk ESS, the standard
deviation of ``x2`` (truth 4.36) and of ``x1`` (truth 10), the mean of ``x2`` in Monte
Carlo standard errors (truth 0), the mean quantile-coverage error of the pooled draws,
the share of draws with ``|x1| > 15`` (truth 0.134) in warm-up and after, and the
post-warm-up acceptance rate.
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

from kameleon.core.diagnostics.summary import ess_bulk, mcse_mean, per_parameter, rhat
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.validation.targets import Banana, quantile_error

BANANA = Banana(8, b=0.03, v=100.0)
TAIL = 15.0
TRUE_TAIL = math.erfc(TAIL / 10.0 / math.sqrt(2.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="kmc-lite")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--prefixes", default="")
    args = parser.parse_args()
    options = json.loads(args.options)
    prefixes = [int(p) for p in args.prefixes.split(",") if p] or [args.iterations]
    for seed in (int(s) for s in args.seeds.split(",")):
        started = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = sample_chains(
                BANANA.logdensity,
                BANANA.dim,
                algorithm=args.algorithm,
                chains=args.chains,
                iterations=args.iterations,
                warmup=args.warmup,
                seed=seed,
                options=options,
                warn=False,
            )
        seconds = time.perf_counter() - started
        warm = np.concatenate([r.draws[: args.warmup] for r in results])
        for n in prefixes:
            draws = np.stack([r.draws[args.warmup : args.warmup + n] for r in results])
            flat = draws.reshape(-1, BANANA.dim)
            accepted = np.concatenate([r.accepted[args.warmup : args.warmup + n] for r in results])
            row = {
                "algorithm": args.algorithm,
                "options": options,
                "seed": seed,
                "chains": args.chains,
                "warmup": args.warmup,
                "draws": n,
                "max_rhat": round(float(np.max(per_parameter(rhat, draws))), 3),
                "min_ess_bulk": round(float(np.min(per_parameter(ess_bulk, draws))), 1),
                "sd_x1": round(float(flat[:, 0].std()), 3),
                "sd_x2": round(float(flat[:, 1].std()), 3),
                "mean_x2_in_mcse": round(float(flat[:, 1].mean() / mcse_mean(draws[:, :, 1])), 2),
                "qerr": round(quantile_error(BANANA.quantile_coverage(flat)), 4),
                "tail_warmup": round(float(np.mean(np.abs(warm[:, 0]) > TAIL)), 4),
                "tail": round(float(np.mean(np.abs(flat[:, 0]) > TAIL)), 4),
                "tail_truth": round(TRUE_TAIL, 4),
                "acceptance": round(float(accepted.mean()), 3),
                "seconds": round(seconds, 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
