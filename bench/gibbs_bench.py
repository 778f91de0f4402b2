"""Gibbs blocks on seed 004's Bayesian linear regression: the client's conditionals
against Metropolis-Hastings blocks and against ``am``, in process, same budget.

The model: ``y = X w + e``, ``e ~ N(0, 1 / tau)``, ``w ~ N(0, I / alpha)``,
``tau ~ Gamma(1, 1)``, ``alpha ~ Gamma(1, 1)``, on a synthetic data set (N = 50, an
intercept and one slope, seed 4; the one the tests use). Its parameters are
``(w_0, w_1, tau, alpha)``. The truth: the weights' posterior means by quadrature over
the two log precisions (1e-8), the posterior sds from a long conditional Gibbs run
(4 x 200 000 sweeps).

Configurations (each 4 chains, ``--warmup`` + ``--iterations`` transitions, seeds 1..3):

- ``gibbs-conditional``: the weights and the noise precision drawn from their full
  conditionals (by the client, here a Python function), the weight precision by a
  Metropolis-Hastings block: 3 evaluations a sweep.
- ``gibbs-all-conditional``: the weight precision drawn from its full conditional too
  (``Gamma(C + P / 2, D + |w|^2 / 2)``): plain Gibbs, 3 evaluations a sweep.
- ``gibbs-mh``: ``gibbs`` with its default blocks, one coordinate each, all
  Metropolis-Hastings: 4 evaluations a sweep.
- ``am``: one block of all four: 1 evaluation a transition.

Reported per configuration, median over the seeds: the largest error of a weight's
posterior mean in units of its Monte Carlo standard error (``z``) and in units of its
posterior sd, the sds' ratio to the truth, and the smallest bulk ESS per 1000
evaluations (every block update one evaluation, warm-up included).

    .venv/bin/python bench/gibbs_bench.py --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import kameleon
from kameleon.core.diagnostics.summary import ess_bulk, ess_mean, per_parameter

_rng = np.random.default_rng(4)
N = 50
X = np.column_stack([np.ones(N), _rng.normal(size=N)])
Y = X @ np.array([1.0, -0.5]) + _rng.normal(scale=0.5, size=N)
A, B, C, D = 1.0, 1.0, 1.0, 1.0
P = 2
XTX, XTY, YTY = X.T @ X, X.T @ Y, float(Y @ Y)


def log_density(theta: np.ndarray) -> float:
    w, tau, alpha = theta[:2], theta[2], theta[3]
    if not (tau > 0 and alpha > 0):
        return -math.inf
    r = Y - X @ w
    return float(
        (N / 2 + A - 1) * math.log(tau)
        - tau * (B + 0.5 * r @ r)
        + (P / 2 + C - 1) * math.log(alpha)
        - alpha * (D + 0.5 * w @ w)
    )


def draw_weights(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    tau, alpha = theta[2], theta[3]
    cov = np.linalg.inv(alpha * np.eye(P) + tau * XTX)
    return rng.multivariate_normal(cov @ (tau * XTY), cov)


def draw_noise_precision(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    r = Y - X @ theta[:2]
    return np.array([rng.gamma(A + N / 2, 1.0 / (B + 0.5 * float(r @ r)))])


def draw_weight_precision(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    w = theta[:2]
    return np.array([rng.gamma(C + P / 2, 1.0 / (D + 0.5 * float(w @ w)))])


def exact_weight_means() -> np.ndarray:
    """The weights' posterior means by quadrature over the log precisions (see
    ``tests/service/test_gibbs_http.py`` for the derivation)."""
    lt = np.linspace(math.log(4.0) - 3.0, math.log(4.0) + 3.0, 600)
    la = np.linspace(-9.0, 5.0, 600)
    log_tau, log_alpha = np.meshgrid(lt, la, indexing="ij")
    tau, alpha = np.exp(log_tau), np.exp(log_alpha)
    a11, a22, a12 = alpha + tau * XTX[0, 0], alpha + tau * XTX[1, 1], tau * XTX[0, 1]
    det = a11 * a22 - a12 * a12
    b1, b2 = tau * XTY[0], tau * XTY[1]
    m1 = (a22 * b1 - a12 * b2) / det
    m2 = (a11 * b2 - a12 * b1) / det
    log_post = (
        (A - 1 + N / 2 + 1) * log_tau
        - B * tau
        + (C - 1 + P / 2 + 1) * log_alpha
        - D * alpha
        - 0.5 * np.log(det)
        - 0.5 * tau * YTY
        + 0.5 * (b1 * m1 + b2 * m2)
    )
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    return np.array([(weight * m1).sum(), (weight * m2).sum()])


def reference_sds(sweeps: int) -> np.ndarray:
    """Posterior sds from a long plain-numpy Gibbs run of all three full conditionals."""
    rng = np.random.default_rng(2026)
    theta = np.array([0.0, 0.0, 1.0, 1.0])
    out = np.empty((sweeps, 4))
    for t in range(sweeps):
        theta[:2] = draw_weights(theta, rng)
        theta[2] = draw_noise_precision(theta, rng)[0]
        theta[3] = draw_weight_precision(theta, rng)[0]
        out[t] = theta
    return out[sweeps // 10 :].std(axis=0)  # type: ignore[no-any-return]


CONFIGS: dict[str, dict[str, Any]] = {
    "gibbs-conditional": {
        "algorithm": "gibbs",
        "blocks": [
            {"indices": [0, 1], "conditional": True},
            {"indices": [2], "conditional": True},
            {"indices": [3]},
        ],
        "conditionals": {0: draw_weights, 1: draw_noise_precision},
        "per_transition": 3,
    },
    "gibbs-all-conditional": {
        "algorithm": "gibbs",
        "blocks": [
            {"indices": [0, 1], "conditional": True},
            {"indices": [2], "conditional": True},
            {"indices": [3], "conditional": True},
        ],
        "conditionals": {0: draw_weights, 1: draw_noise_precision, 2: draw_weight_precision},
        "per_transition": 3,
    },
    "gibbs-mh": {"algorithm": "gibbs", "per_transition": 4},
    "am": {"algorithm": "am", "per_transition": 1},
}


def run(name: str, seed: int, warmup: int, iterations: int, means: np.ndarray, sds: np.ndarray):  # type: ignore[no-untyped-def]
    config = dict(CONFIGS[name])
    per = config.pop("per_transition")
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        result = kameleon.sample(
            log_density, 4, chains=4, warmup=warmup, iterations=iterations, seed=seed,
            progress=False, initial=np.array([0.0, 0.0, 1.0, 1.0]), **config,
        )  # fmt: skip
    seconds = time.perf_counter() - started
    draws = result.draws
    ess = per_parameter(ess_mean, draws)
    mean = draws.mean(axis=(0, 1))
    sd = draws.std(axis=(0, 1))
    mcse = sd / np.sqrt(ess)
    evaluations = 4 * (warmup + iterations) * per
    return {
        "z": float(np.max(np.abs(mean[:2] - means) / mcse[:2])),
        "error_sd": float(np.max(np.abs(mean[:2] - means) / sds[:2])),
        "sd_ratio_min": float(np.min(sd / sds)),
        "sd_ratio_max": float(np.max(sd / sds)),
        "ess_per_1k": float(np.min(per_parameter(ess_bulk, draws)) / evaluations * 1000),
        "warnings": sorted({w.code for w in result.warnings}),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=4000)
    parser.add_argument("--reference-sweeps", type=int, default=200_000)
    parser.add_argument("--output", default="bench/results/gibbs.json")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    means = exact_weight_means()
    sds = reference_sds(args.reference_sweeps)
    print(f"truth: weight means {means}, sds {sds}", flush=True)
    rows: dict[str, Any] = {}
    for name in CONFIGS:
        runs = [run(name, s, args.warmup, args.iterations, means, sds) for s in seeds]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "warnings"}
        row["warnings"] = [r["warnings"] for r in runs]
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    out = {
        "python": sys.version.split()[0],
        "seeds": seeds,
        "warmup": args.warmup,
        "iterations": args.iterations,
        "truth": {"weight_means": means.tolist(), "sds": sds.tolist()},
        "rows": rows,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
