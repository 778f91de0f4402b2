"""Sampler benchmarks, in process: the seeds' targets at the seeds' run lengths.

    .venv/bin/python bench/samplers_bench.py [--chains 4] [--scale 1.0] [--processes 2]

For each target and sampler, several independent chains from the origin (Banana from
the origin, as the KAMH experiments) report, over the post-warm-up draws:
acceptance rate, the norm of the error of the mean, the mean quantile-coverage error
(exact for the Banana and the Gaussian, approximate for the Flower), the minimum and
mean bulk ESS per 1000 density evaluations, and the time per iteration (ask + tell +
the density, in process). ``--scale`` shortens every run (a smoke run uses 0.05).
Results go to ``bench/results/samplers.json`` and, as a Markdown table, to stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kameleon.core import SAMPLERS  # noqa: E402
from kameleon.core.diagnostics.summary import ess_bulk  # noqa: E402
from kameleon.core.running.inprocess import run_chain  # noqa: E402
from kameleon.core.validation.targets import Banana, Flower, Gaussian, quantile_error  # noqa: E402


def _correlated_gaussian(dim: int) -> Gaussian:
    rng = np.random.default_rng(2014)
    scales = np.geomspace(0.1, 10.0, dim)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    cov = q @ np.diag(scales**2) @ q.T
    return Gaussian(mean=np.zeros(dim), covariance=cov)


#: name -> (target, iterations, warm-up): the seeds' run lengths (ALGORITHMS.md 1.4).
TARGETS: dict[str, tuple[Any, int, int]] = {
    "banana-0.1": (Banana(dim=8, b=0.1, v=100.0), 80_000, 40_000),  # B(0.1, 100)
    "banana-0.03": (Banana(dim=8, b=0.03, v=100.0), 40_000, 20_000),  # B(0.03, 100)
    "flower": (Flower(dim=8), 120_000, 60_000),  # F(10, 6, 6, 1)
    "gaussian": (_correlated_gaussian(8), 40_000, 20_000),  # scales 0.1 to 10, rotated
}


def one_chain(task: tuple[str, str, int, float]) -> dict[str, Any]:
    target_name, algorithm, chain, scale = task
    target, iterations, warmup = TARGETS[target_name]
    iterations, warmup = max(200, int(iterations * scale)), max(100, int(warmup * scale))
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(target.dim, {}, warmup=warmup)
    started = time.perf_counter()
    run = run_chain(
        sampler, params, target.logdensity, np.zeros(target.dim), iterations, seed=1, chain=chain
    )
    seconds = time.perf_counter() - started
    draws = np.asarray(run.draws[warmup:])
    kept = len(draws)
    ess = np.array([ess_bulk(draws[None, :, i]) for i in range(target.dim)])
    mean = target.mean if target.mean is not None else np.zeros(target.dim)
    return {
        "target": target_name,
        "algorithm": algorithm,
        "chain": chain,
        "acceptance": float(np.mean(run.accepted[warmup:])),
        "mean_error": float(np.linalg.norm(draws.mean(axis=0) - mean)),
        "quantile_error": float(quantile_error(target.quantile_coverage(draws))),
        "min_ess_per_1000": float(np.nanmin(ess) / kept * 1000),
        "mean_ess_per_1000": float(np.nanmean(ess) / kept * 1000),
        "us_per_iteration": seconds / (iterations + 1) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--algorithms", default=",".join(SAMPLERS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "samplers.json"))
    args = parser.parse_args()
    tasks = [
        (t, a, c, args.scale)
        for t in args.targets.split(",")
        for a in args.algorithms.split(",")
        for c in range(args.chains)
    ]
    with mp.get_context("spawn").Pool(args.processes) as pool:
        rows = pool.map(one_chain, tasks, chunksize=1)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(
        json.dumps({"scale": args.scale, "chains": args.chains, "rows": rows}, indent=1) + "\n"
    )
    metrics = [
        "acceptance",
        "mean_error",
        "quantile_error",
        "min_ess_per_1000",
        "mean_ess_per_1000",
        "us_per_iteration",
    ]
    print("| target | sampler | " + " | ".join(metrics) + " |")
    print("|---|---|" + "---|" * len(metrics))
    for t in args.targets.split(","):
        for a in args.algorithms.split(","):
            mine = [r for r in rows if r["target"] == t and r["algorithm"] == a]
            cells = []
            for m in metrics:
                values = np.array([r[m] for r in mine])
                cells.append(f"{np.median(values):.3g} ({values.min():.3g}-{values.max():.3g})")
            print(f"| {t} | {a} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
