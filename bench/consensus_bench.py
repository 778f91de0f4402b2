"""Consensus Monte Carlo on Bayesian logistic regression: J shard posteriors combined
against the full-data posterior, in process.

    .venv/bin/python bench/consensus_bench.py [--seeds 1,2,3] [--out bench/results/consensus.json]
    .venv/bin/python bench/consensus_bench.py --table bench/results/consensus.json

Data, per seed: n points, an intercept and d - 1 standard normal features, labels from
the logistic model with coefficients (-0.5, 1, -1, 0.5) (d = 4); prior N(0, 5^2) on every
coefficient. The full posterior and each shard's subposterior (the data split in J
contiguous shards, the prior raised to 1/J) are sampled by ``kameleon.sample`` with
``nuts`` and the exact gradient, 4 chains of 1000 warm-up and 2000 draws each;
``kameleon.consensus`` combines the shards by both rules (``weighted``, ``gaussian``;
``POST /v1/consensus`` gives the same answer from the same draws).

Reported per case (n, J), the median over seeds (and the range): the largest error of a
consensus mean over the coordinates, in full-posterior standard deviations; the largest
relative error of a consensus standard deviation; the relative Frobenius error of the
covariance; whether ``non_gaussian`` warnings were raised. The full posterior's own
Monte Carlo error is about 1/sqrt(ESS) ~ 0.02 sd, so errors below that are noise.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

import kameleon

BETA = np.array([-0.5, 1.0, -1.0, 0.5])
PRIOR_SD = 5.0
CASES = ((1000, 4), (1000, 16), (200, 4))


def target(x: np.ndarray, y: np.ndarray, power: float) -> Any:
    """The log density ``power * log prior + log likelihood`` and its gradient."""

    def f(b: np.ndarray) -> tuple[float, np.ndarray]:
        eta = x @ b
        ll = float(np.sum(y * eta - np.logaddexp(0.0, eta)))
        grad = x.T @ (y - expit(eta))
        lp = -0.5 * float(b @ b) / PRIOR_SD**2
        return power * lp + ll, power * (-b / PRIOR_SD**2) + grad

    return f


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, BETA.size - 1))])
    y = (rng.random(n) < expit(x @ BETA)).astype(float)
    return x, y


def run(n: int, shards: int, seed: int) -> dict[str, Any]:
    x, y = data(n, seed)
    d = BETA.size
    settings = {"algorithm": "nuts", "chains": 4, "iterations": 2000, "warmup": 1000}
    started = time.perf_counter()
    full = kameleon.sample(target(x, y, 1.0), d, seed=seed, progress=False, **settings)
    parts = [
        kameleon.sample(
            target(
                x[j * n // shards : (j + 1) * n // shards],
                y[j * n // shards : (j + 1) * n // shards],
                1 / shards,
            ),
            d,
            seed=1000 * seed + j,
            progress=False,
            **settings,
        )
        for j in range(shards)
    ]
    pooled = full.draws.reshape(-1, d)
    mean, sd, cov = pooled.mean(axis=0), pooled.std(axis=0), np.cov(pooled, rowvar=False)
    out: dict[str, Any] = {
        "n": n,
        "shards": shards,
        "seed": seed,
        "seconds": time.perf_counter() - started,
        "full_max_r_hat": full.diagnostics.max_r_hat,
        "shard_warnings": sorted({w.code for r in parts for w in r.warnings}),
    }
    for method in ("weighted", "gaussian"):
        c = kameleon.consensus(parts, method=method)  # type: ignore[arg-type]
        out[method] = {
            "mean_error_sd": float(np.max(np.abs(c.mean - mean) / sd)),
            "sd_error": float(np.max(np.abs(c.sd / sd - 1))),
            "cov_error": float(np.linalg.norm(c.covariance - cov) / np.linalg.norm(cov)),
            "non_gaussian": sum(code == "non_gaussian" for code, _ in c.warnings),
        }
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| n | J | rule | max mean error (sd) | max sd error | cov error (Frobenius) | "
        "non_gaussian warnings |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    for n, shards in CASES:
        rows = [r for r in results if r["n"] == n and r["shards"] == shards]
        if not rows:
            continue
        for method in ("weighted", "gaussian"):
            m = [r[method] for r in rows]
            lines.append(
                f"| {n} | {shards} | {method} | {cell([v['mean_error_sd'] for v in m], '.3f')} | "
                f"{cell([v['sd_error'] for v in m], '.3f')} | "
                f"{cell([v['cov_error'] for v in m], '.3f')} | "
                f"{', '.join(str(v['non_gaussian']) for v in m)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", default="bench/results/consensus.json")
    parser.add_argument("--table", default=None, help="print the table of a results file")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())["results"]))
        return
    results = []
    for n, shards in CASES:
        for seed in map(int, args.seeds.split(",")):
            result = run(n, shards, seed)
            print(json.dumps(result), flush=True)
            results.append(result)
    doc = {"python": sys.version.split()[0], "machine": platform.machine(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
