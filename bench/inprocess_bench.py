"""In-process sampling speed: ``kameleon.sample`` per algorithm against emcee.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/inprocess_bench.py [--rounds 5]

A trivial density (a standard normal in d = 8, ``-0.5 x.x`` in numpy), so that what is
measured is the sampler's own cost per evaluation. Each round runs, one after the other:

- ``kameleon.sample`` with 4 chains (its chains stepped side by side, ``core.running.batch``),
  for every algorithm;
- the same sampler driven by a plain ask/tell loop, chain after chain (what the
  per-chain API costs; rwm and am only);
- emcee's ``EnsembleSampler`` with 32 walkers (the user's in-process alternative).

The figure is density evaluations per second, the median over the rounds, with its ratio
to emcee's median of the same run. Results go to ``bench/results/inprocess.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kameleon  # noqa: E402
from kameleon.core import SAMPLERS  # noqa: E402

DIM, CHAINS = 8, 4
#: Warm-up and kept iterations per chain, by algorithm (the kernel samplers cost 100 us
#: and more per iteration of their own arithmetic).
LENGTH = {"rwm": 5000, "am": 5000, "kameleon": 1000, "kmc-lite": 500, "kmc-finite": 500}


def logdensity(x: np.ndarray) -> float:
    return -0.5 * float(x @ x)


def time_sample(algorithm: str) -> float:
    n = LENGTH[algorithm]
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kameleon.sample(
            logdensity,
            dim=DIM,
            algorithm=algorithm,
            chains=CHAINS,
            warmup=n,
            iterations=n,
            progress=False,
        )
    return CHAINS * (2 * n + 1) / (time.perf_counter() - started)


def time_loop(algorithm: str) -> float:
    """The per-chain API by hand: ask, evaluate, tell, one chain after the other."""
    sampler, n = SAMPLERS[algorithm], LENGTH[algorithm]
    params = sampler.make_params(DIM, {}, warmup=n)
    started = time.perf_counter()
    for chain in range(CHAINS):
        state = sampler.init(np.full(DIM, 0.5), params, seed=1, chain=chain)
        for _ in range(2 * n + 1):
            proposal = sampler.ask(state, params)
            state, _ = sampler.tell(state, params, proposal, logdensity(proposal.position))
    return CHAINS * (2 * n + 1) / (time.perf_counter() - started)


def time_emcee() -> float:
    import emcee

    walkers, steps = 32, 2000
    start = np.random.default_rng(1).standard_normal((walkers, DIM))
    sampler = emcee.EnsembleSampler(walkers, DIM, logdensity)
    started = time.perf_counter()
    sampler.run_mcmc(start, steps)
    return walkers * steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/inprocess.json")
    args = parser.parse_args()
    cases: dict[str, Any] = {f"sample {a}": (time_sample, a) for a in LENGTH}
    cases |= {f"ask/tell loop {a}": (time_loop, a) for a in ("rwm", "am")}
    rates: dict[str, list[float]] = {name: [] for name in [*cases, "emcee"]}
    time_sample("rwm")  # imports and first calls out of the way
    for _ in range(args.rounds):
        for name, (fn, algorithm) in cases.items():
            rates[name].append(fn(algorithm))
        rates["emcee"].append(time_emcee())
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print("| run | evaluations/s (median) | / emcee |")
    print("|---|---|---|")
    for name, rate in medians.items():
        print(f"| {name} | {rate:,.0f} | {rate / medians['emcee']:.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rounds": rates, "medians": medians}, indent=2) + "\n")


if __name__ == "__main__":
    main()
