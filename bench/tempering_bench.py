"""Parallel tempering (``tempering``) in process: the modes of a separated mixture against
``am``, and the log evidence of targets whose normalising constant is known.

    .venv/bin/python bench/tempering_bench.py [--seeds 1,2,3] [--out bench/results/tempering.json]

Targets (2-d):

- ``bimodal``: two unit Gaussians at -(8, 8) and (8, 8), weights 0.3 and 0.7, told as
  one log density (the reference mode, its default reference N(0, 2^2 I)); normalised,
  ``log Z = 0``. Reported: the share of post-warm-up draws in the heavier mode (truth
  0.7) and the log evidence; for ``am`` the share only.
- ``bimodal-split``: the same mixture as a likelihood under the prior N(0, 10^2 I), told
  as prior and likelihood apart (``tempered: "likelihood"``): the posterior keeps the
  weights, ``log Z = log N((8, 8); 0, 101 I)``.
- ``gauss-split``: a unit Gaussian likelihood of one observation (1, -0.5) under the
  prior N(0, 3^2 I), told apart: ``log Z = log N((1, -0.5); 0, 10 I)``.
- ``gauss-reference``: the unnormalised Gaussian of mean 1 and sds (1, 2), told as one
  log density: ``log Z = log(2 pi 2)``.

Every run: 8 chains, 1000 warm-up transitions and 2000 draws, default options (8 rungs);
a transition is 8 evaluations (``am``: 1). Reported per target, the median over seeds
(and the range) of the error of log Z, the error in units of the reported standard
error, the share of the heavier mode where there is one, and the warnings.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kameleon.core import SAMPLERS
from kameleon.core.running.inprocess import assess_results, sample_chains

MODE = np.array([8.0, 8.0])
Y = np.array([1.0, -0.5])
SD = np.array([1.0, 2.0])
CHAINS, WARMUP, ITERATIONS = 8, 1000, 2000


def _mixture(v: np.ndarray) -> float:
    a = math.log(0.3) - 0.5 * float((v + MODE) @ (v + MODE))
    b = math.log(0.7) - 0.5 * float((v - MODE) @ (v - MODE))
    top = max(a, b)
    return top + math.log(math.exp(a - top) + math.exp(b - top)) - math.log(2 * math.pi)


def _gaussian_prior(v: np.ndarray, var: float) -> float:
    return -0.5 * float(v @ v) / var - math.log(2 * math.pi * var)


TARGETS: dict[str, tuple[Callable[[np.ndarray], Any], dict[str, Any], float, bool]] = {
    "bimodal": (lambda x: _mixture(np.asarray(x)), {}, 0.0, True),
    "bimodal-split": (
        lambda x: (_gaussian_prior(np.asarray(x), 100.0), _mixture(np.asarray(x))),
        {"tempered": "likelihood"},
        -0.5 * 128 / 101 - math.log(2 * math.pi * 101),
        True,
    ),
    "gauss-split": (
        lambda x: (
            _gaussian_prior(np.asarray(x), 9.0),
            -0.5 * float((np.asarray(x) - Y) @ (np.asarray(x) - Y)) - math.log(2 * math.pi),
        ),
        {"tempered": "likelihood"},
        -0.5 * float(Y @ Y) / 10.0 - math.log(2 * math.pi * 10.0),
        False,
    ),
    "gauss-reference": (
        lambda x: -0.5 * float(np.sum((np.asarray(x) - 1.0) ** 2 / SD**2)),
        {},
        math.log(2 * math.pi * 2.0),
        False,
    ),
}


def _one(name: str, algorithm: str, seed: int) -> dict[str, Any]:
    fn, options, log_z, two_modes = TARGETS[name]
    if algorithm == "am":
        options = {}
        if isinstance(fn(np.zeros(2)), tuple):
            split = fn
            fn = lambda x: sum(split(x))  # noqa: E731
    sampler = SAMPLERS[algorithm]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = sample_chains(
            fn, 2, algorithm=algorithm, chains=CHAINS, warmup=WARMUP, iterations=ITERATIONS,
            seed=seed, options=options, warn=False,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    params = sampler.make_params(2, options, warmup=WARMUP)
    assessment = assess_results(sampler, params, results, ["a", "b"], WARMUP)
    draws = np.stack([r.draws[WARMUP:] for r in results])
    row: dict[str, Any] = {
        "target": name,
        "algorithm": algorithm,
        "seed": seed,
        "seconds": seconds,
        "warnings": sorted({f.code for f in assessment.findings}),
        "share": float((draws[..., 0] > 0).mean()) if two_modes else None,
    }
    ev = assessment.evidence
    if ev is not None:
        row["error"] = ev.log_evidence - log_z
        row["se"] = ev.standard_error
        row["error_se"] = (ev.log_evidence - log_z) / ev.standard_error
    return row


def _median(rows: list[dict[str, Any]], key: str, fmt: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return ""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} to {max(values):{fmt}})"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| target | sampler | log Z error | error / reported se | share of the 0.7 mode "
        "| warnings |",
        "|---|---|---|---|---|---|",
    ]
    for name in TARGETS:
        for algorithm in ("tempering", "am"):
            group = [r for r in rows if r["target"] == name and r["algorithm"] == algorithm]
            if not group:
                continue
            codes = "; ".join(", ".join(r["warnings"]) or "none" for r in group)
            lines.append(
                f"| {name} | {algorithm} | {_median(group, 'error', '+.3f')} | "
                f"{_median(group, 'error_se', '+.1f')} | {_median(group, 'share', '.3f')} | "
                f"{codes} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, (_, _, _, two_modes) in TARGETS.items():
            rows.append(_one(name, "tempering", seed))
            if two_modes:
                rows.append(_one(name, "am", seed))
            print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
