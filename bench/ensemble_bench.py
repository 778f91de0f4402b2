"""The ensemble sampler's autocorrelation time against emcee's, and against `am`, in
process.

    .venv/bin/python bench/ensemble_bench.py [--seeds 1,2,3] [--out bench/results/ensemble.json]

Targets: ``correlated-2d``, a Gaussian with correlation 0.99 and standard deviations
0.01 and 100 (condition number about 2e10: affine invariance makes it a standard
normal for the stretch move), and ``iid-10d``, a standard normal in 10 dimensions (the
ensemble's weak side: its time grows with the dimension).

Each run: one ensemble of ``W = max(8, 2 dim)`` walkers, started in a ball of 0.1
around the mean, 1000 sweeps of burn-in and 10 000 kept; emcee's ``EnsembleSampler``
(its default stretch move, ``a = 2``) the same, if emcee is installed (it is not a
dependency of kameleon): as emcee runs by default, with the walkers split in two at
random at every step (``randomize_split``), and with fixed halves; kameleon's
``ensemble`` both ways too (``split``: ``"fixed"``, its default, and ``"random"``). Both times are emcee's ``integrated_time`` estimator
(``core.diagnostics.autocorr``, which gives emcee's numbers on the same draws), in sweeps: since a
sweep is ``W`` evaluations giving ``W`` draws, it is also the evaluations per
effective draw. ``am`` (one chain, 4000 warm-up, ``W x 10 000`` draws, the same
evaluations as an ensemble's kept sweeps) is given the same estimator with its chain
as one walker: evaluations per effective draw again.

Reported per target: the median over seeds (and the range) of the largest time over
the parameters, and the acceptance rate.
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

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.assess import autocorrelation_times
from kameleon.core.diagnostics.autocorr import by_walker, integrated_time
from kameleon.core.running.inprocess import sample_chains
from kameleon.core.validation.targets import Gaussian

BURN, KEPT, SPREAD = 1000, 10_000, 0.1


def targets() -> dict[str, Gaussian]:
    scales = np.array([0.01, 100.0])
    return {
        "correlated-2d": Gaussian(
            [1.0, -50.0], np.outer(scales, scales) * np.array([[1.0, 0.99], [0.99, 1.0]])
        ),
        "iid-10d": Gaussian(np.zeros(10), np.eye(10)),
    }


def kameleon_ensemble(target: Gaussian, seed: int, split: str = "fixed") -> dict[str, Any]:
    dim = target.dim
    options = {"initial_spread": SPREAD, "split": split}
    params = SAMPLERS["ensemble"].make_params(dim, options, warmup=0)
    w = params.size
    warmup = w * BURN
    start = time.perf_counter()
    (result,) = sample_chains(
        target.logdensity,
        dim,
        algorithm="ensemble",
        chains=1,
        iterations=w * KEPT,
        warmup=warmup,
        initial=target.mean,
        seed=seed,
        options=options,
        warn=False,
    )
    seconds = time.perf_counter() - start
    walkers = by_walker(result.draws[None, warmup:], w, warmup + 1)
    return {
        "tau": max(autocorrelation_times(walkers)),
        "acceptance": float(result.accepted[warmup:].mean()),
        "walkers": w,
        "seconds": seconds,
    }


def emcee_ensemble(target: Gaussian, seed: int, *, randomize_split: bool) -> dict[str, Any] | None:
    try:
        import emcee  # type: ignore[import-untyped]
    except ImportError:
        return None
    dim = target.dim
    w = max(8, 2 * dim)
    rng = np.random.default_rng(seed)
    p0 = target.mean + SPREAD * rng.standard_normal((w, dim))
    move = emcee.moves.StretchMove(randomize_split=randomize_split)
    sampler = emcee.EnsembleSampler(w, dim, target.logdensity, moves=[move])
    sampler.random_state = np.random.RandomState(seed).get_state()
    start = time.perf_counter()
    sampler.run_mcmc(p0, BURN + KEPT, progress=False)
    seconds = time.perf_counter() - start
    chain = sampler.get_chain(discard=BURN)  # (steps, walkers, dim)
    ours = max(integrated_time(chain[:, :, i]) for i in range(dim))
    theirs = float(np.max(emcee.autocorr.integrated_time(chain, quiet=True)))
    return {
        "tau": theirs,
        "tau_core_autocorr": ours,
        "acceptance": float(np.mean(sampler.acceptance_fraction)),
        "walkers": w,
        "seconds": seconds,
        "version": emcee.__version__,
    }


def am_chain(target: Gaussian, seed: int) -> dict[str, Any]:
    dim = target.dim
    n = max(8, 2 * dim) * KEPT
    start = time.perf_counter()
    (result,) = sample_chains(
        target.logdensity,
        dim,
        algorithm="am",
        chains=1,
        iterations=n,
        warmup=4000,
        initial=target.mean,
        seed=seed,
        warn=False,
    )
    seconds = time.perf_counter() - start
    draws = result.draws[4000:]
    return {
        "tau": max(integrated_time(draws[:, i]) for i in range(dim)),
        "acceptance": float(result.accepted[4000:].mean()),
        "seconds": seconds,
    }


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", default="bench/results/ensemble.json")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, Any] = {}
    for name, target in targets().items():
        runs[name] = {
            "kameleon": [kameleon_ensemble(target, s) for s in seeds],
            "kameleon_random_split": [kameleon_ensemble(target, s, "random") for s in seeds],
            "emcee": [emcee_ensemble(target, s, randomize_split=True) for s in seeds],
            "emcee_fixed_halves": [emcee_ensemble(target, s, randomize_split=False) for s in seeds],
            "am": [am_chain(target, s) for s in seeds],
        }
    lines = [
        "| target | W | ensemble tau | ensemble tau, random split | emcee tau "
        "| emcee tau, fixed halves | am evaluations per effective draw "
        "| acceptance (ensemble / emcee / am) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, by in runs.items():
        ours = by["kameleon"]
        theirs = [r for r in by["emcee"] if r is not None]
        fixed = [r for r in by["emcee_fixed_halves"] if r is not None]
        emcee_tau = summary([r["tau"] for r in theirs]) if theirs else "not installed"
        fixed_tau = summary([r["tau"] for r in fixed]) if fixed else "not installed"
        emcee_acc = f"{statistics.median(r['acceptance'] for r in theirs):.2f}" if theirs else "-"
        lines.append(
            f"| {name} | {ours[0]['walkers']} | {summary([r['tau'] for r in ours])} "
            f"| {summary([r['tau'] for r in by['kameleon_random_split']])} "
            f"| {emcee_tau} | {fixed_tau} | {summary([r['tau'] for r in by['am']])} "
            f"| {statistics.median(r['acceptance'] for r in ours):.2f} / {emcee_acc} / "
            f"{statistics.median(r['acceptance'] for r in by['am']):.2f} |"
        )
    print("\n".join(lines))
    doc = {
        "seeds": seeds,
        "burn_sweeps": BURN,
        "kept_sweeps": KEPT,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
