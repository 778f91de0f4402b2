"""The log evidence of targets whose normalising constant is known: Kameleon's
``importance`` against dynesty (static nested sampling), in process, side by side.

    .venv/bin/python bench/evidence_bench.py [--seeds 1,2,3] [--out bench/results/evidence.json]
    .venv/bin/python bench/evidence_bench.py --table bench/results/evidence.json

The anchor is not a dependency of Kameleon: ``pip install dynesty==3.1.0`` in the
bench's environment (without it the dynesty rows are skipped with a message).

Each target is a prior (uniform on a box) times a likelihood; the log evidence is
``log Z = log integral prior(x) L(x) dx``:

- ``gauss10``: a 10-d correlated Gaussian likelihood (condition number about 100, seed
  0) in the box (-10, 10)^10: ``log Z = log((2 pi)^5 |S|^(1/2)) - 10 log 20`` (the mass
  outside the box is below 1e-20).
- ``mixture4``: an equal mixture of two unit Gaussians in 4-d, means at -6 and +6 in
  every coordinate (12 sd apart along each axis), in (-10, 10)^4:
  ``log Z = -4 log 20`` (each component integrates to 1).
- ``eggbox``: dynesty's test, ``L = exp((2 + cos(x / 2) cos(y / 2))^5)`` on
  (0, 10 pi)^2, ``log Z = 235.856`` (dynesty's reference figure).
- ``shells``: two Gaussian shells in 2-d (radius 2, width 0.1, centres (-3.5, 0) and
  (3.5, 0)) in (-6, 6)^2, Feroz and Hobson's test, ``log Z = -1.75`` (their figure).

Kameleon: ``importance`` with 16 chains started uniformly in the box, 4000 warm-up
transitions (am) and 1000 importance draws per chain, default options; its log density
is ``log prior + log L`` (``-inf`` outside the box). Evaluations: every transition of
every chain, warm-up included (80 000, and the 16 initial points). dynesty:
``NestedSampler`` with 500 live points, ``rwalk`` moves, ``dlogz = 0.1``; evaluations
counted by a wrapper around the likelihood. Reported per target and sampler, the median
over seeds (and the range) of the error of log Z, the error in units of the reported
standard error, and the evaluations; for ``importance`` also the weights' Pareto k and
the warnings.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kameleon.core import SAMPLERS
from kameleon.core.run import assess_results, sample_chains


@dataclass(frozen=True)
class Target:
    name: str
    dim: int
    low: float
    high: float
    log_likelihood: Callable[[np.ndarray], float]
    log_z: float

    def log_prior(self, x: np.ndarray) -> float:
        if np.all(x > self.low) and np.all(x < self.high):
            return -self.dim * math.log(self.high - self.low)
        return -math.inf

    def log_density(self, x: np.ndarray) -> float:
        lp = self.log_prior(x)
        return lp if lp == -math.inf else lp + self.log_likelihood(x)


def _gauss10() -> Target:
    rng = np.random.default_rng(0)
    d = 10
    a = rng.standard_normal((d, d))
    cov = a @ a.T / d + 0.1 * np.eye(d)
    precision = np.linalg.inv(cov)
    mean = rng.normal(0, 1, d)

    def ll(x: np.ndarray) -> float:
        r = x - mean
        return -0.5 * float(r @ precision @ r)

    log_z = 0.5 * d * math.log(2 * math.pi) + 0.5 * float(np.linalg.slogdet(cov)[1])
    return Target("gauss10", d, -10, 10, ll, log_z - d * math.log(20))


def _mixture4() -> Target:
    d = 4
    norm = -0.5 * d * math.log(2 * math.pi) + math.log(0.5)

    def ll(x: np.ndarray) -> float:
        a = -0.5 * float(np.sum((x + 6) ** 2))
        b = -0.5 * float(np.sum((x - 6) ** 2))
        return norm + max(a, b) + math.log1p(math.exp(-abs(a - b)))

    return Target("mixture4", d, -10, 10, ll, -d * math.log(20))


def _eggbox() -> Target:
    def ll(x: np.ndarray) -> float:
        return float((2.0 + math.cos(x[0] / 2) * math.cos(x[1] / 2)) ** 5)

    return Target("eggbox", 2, 0, 10 * math.pi, ll, 235.856)


def _shells() -> Target:
    centres = np.array([[-3.5, 0.0], [3.5, 0.0]])
    r, w = 2.0, 0.1
    c = 1 / math.sqrt(2 * math.pi * w * w)

    def ll(x: np.ndarray) -> float:
        d = np.sqrt(np.sum((x - centres) ** 2, axis=1))
        terms = -((d - r) ** 2) / (2 * w * w)
        top = float(terms.max())
        return math.log(c) + top + math.log(float(np.sum(np.exp(terms - top))))

    return Target("shells", 2, -6, 6, ll, -1.75)


TARGETS = {t.name: t for t in (_gauss10(), _mixture4(), _eggbox(), _shells())}


def run_importance(target: Target, seed: int) -> dict[str, Any]:
    chains, warmup, iterations = 16, 4000, 1000
    rng = np.random.default_rng(seed)
    starts = rng.uniform(target.low, target.high, size=(chains, target.dim))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = sample_chains(
            target.log_density, target.dim, algorithm="importance", chains=chains,
            warmup=warmup, iterations=iterations, seed=seed, initial=starts, warn=False,
        )  # fmt: skip
    sampler = SAMPLERS["importance"]
    params = sampler.make_params(target.dim, {}, warmup=warmup)
    names = [f"x{i}" for i in range(target.dim)]
    a = assess_results(sampler, params, results, names, warmup)
    assert a.evidence is not None
    ev = a.evidence
    return {
        "log_z": ev.log_evidence,
        "se": ev.standard_error,
        "evaluations": chains * (warmup + iterations + 1),
        "pareto_k": ev.pareto_k,
        "ess": ev.ess,
        "warnings": sorted({f.code for f in a.findings}),
        "seconds": time.perf_counter() - started,
    }


def run_dynesty(target: Target, seed: int) -> dict[str, Any] | None:
    try:
        import dynesty  # type: ignore[import-not-found]
    except ImportError:
        print("dynesty is not installed: pip install dynesty==3.1.0", file=sys.stderr)
        return None
    calls = [0]

    def loglike(x: np.ndarray) -> float:
        calls[0] += 1
        return target.log_likelihood(np.asarray(x))

    def prior_transform(u: np.ndarray) -> np.ndarray:
        return target.low + (target.high - target.low) * u

    started = time.perf_counter()
    sampler = dynesty.NestedSampler(
        loglike, prior_transform, target.dim, nlive=500, sample="rwalk",
        rstate=np.random.default_rng(seed),
    )  # fmt: skip
    sampler.run_nested(dlogz=0.1, print_progress=False)
    res = sampler.results
    return {
        "log_z": float(res.logz[-1]),
        "se": float(res.logzerr[-1]),
        "evaluations": calls[0],
        "seconds": time.perf_counter() - started,
        "version": dynesty.__version__,
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| target | sampler | log Z error | error / reported se | evaluations | Pareto k | "
        "warnings |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} to {max(values):{fmt}})"

    for name, target in TARGETS.items():
        for sampler in ("importance", "dynesty"):
            rows = [r[sampler] for r in results if r["target"] == name and r.get(sampler)]
            if not rows:
                continue
            errors = [r["log_z"] - target.log_z for r in rows]
            z = [
                e / r["se"] if r["se"] > 0 else math.inf for e, r in zip(errors, rows, strict=True)
            ]
            k = cell([r["pareto_k"] for r in rows], ".2f") if sampler == "importance" else ""
            warned = (
                "; ".join(",".join(r["warnings"]) or "none" for r in rows)
                if sampler == "importance"
                else ""
            )
            lines.append(
                f"| {name} | {sampler} | {cell(errors, '+.3f')} | {cell(z, '+.1f')} | "
                f"{statistics.median(r['evaluations'] for r in rows):.0f} | {k} | {warned} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", default="bench/results/evidence.json")
    parser.add_argument("--table", default=None, help="print the table of a results file")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())["results"]))
        return
    results = []
    for name in args.targets.split(","):
        target = TARGETS[name]
        for seed in map(int, args.seeds.split(",")):
            row = {
                "target": name,
                "seed": seed,
                "truth": target.log_z,
                "importance": run_importance(target, seed),
                "dynesty": run_dynesty(target, seed),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
    doc = {"python": sys.version.split()[0], "machine": platform.machine(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
