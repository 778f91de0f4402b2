"""The Glass GP classification (pseudo-marginal) through the service: every sampler's
acceptance, ESS and MMD to a reference sample against the number of iterations.

    # once: the reference sample, a long plain run in process (about 20 minutes on one core):
    # am, 8 chains x 15 000 after 3 000 warm-up, thinned by 60 to 2 000 draws
    .venv/bin/python bench/glass_bench.py reference --out bench/results/glass-reference.npy
    # the samplers through a service (kameleon serve, memory store, started here)
    .venv/bin/python bench/glass_bench.py service --out bench/results/glass.json
    # the plots, from the JSON
    .venv/bin/python bench/glass_bench.py plot --results bench/results/glass.json

The target is ``examples/glass_gpc.py``'s ``GlassGPC``: the nine log length-scales of an
ARD Gaussian-process classifier, the marginal likelihood an unbiased importance-sampling
estimate (100 samples), every session ``pseudo_marginal``, every chain starting at
``theta = 0`` as in the papers. The service is ``kameleon serve`` on the memory store, a
subprocess on a free port; ``kameleon.sample(..., url=...)`` drives it with ``workers``
threads, each asking with a lease, evaluating and telling.

The MMD is the biased (V-statistic) estimate of the squared maximum mean discrepancy
with a Gaussian kernel, its bandwidth the median distance within the reference sample
(the median heuristic, fixed once for every run so that the curves compare). It is
computed on the pooled post-warm-up draws of every chain at each prefix, thinned to at
most ``--mmd-points`` points.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
KAMELEON = str(Path(sys.executable).with_name("kameleon"))

from glass_gpc import GlassGPC  # noqa: E402
from service_bench import free_port, running  # noqa: E402

import kameleon  # noqa: E402
from kameleon.core.diagnostics.summary import ess_bulk, per_parameter, rhat  # noqa: E402

DIM = 9
ALGORITHMS = ("rwm", "am", "kameleon", "kmc-lite", "kmc-finite")
PRECONDITIONED = ("kameleon", "kmc-lite", "kmc-finite")  # the samplers with `preconditioning`


# ------------------------------------------------------------------------------ MMD


def median_bandwidth(points: np.ndarray) -> float:
    """The median of the pairwise distances between ``points`` (the median heuristic)."""
    sq = _squared_distances(points, points)
    upper = sq[np.triu_indices(len(points), k=1)]
    return float(math.sqrt(np.median(upper)))


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(sq, 0.0)


def mmd2(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """The biased estimate of the squared MMD between the samples ``x`` and ``y`` with the
    Gaussian kernel ``exp(-|a - b|^2 / (2 bandwidth^2))``."""
    scale = -0.5 / bandwidth**2
    kxx = np.exp(scale * _squared_distances(x, x)).mean()
    kyy = np.exp(scale * _squared_distances(y, y)).mean()
    kxy = np.exp(scale * _squared_distances(x, y)).mean()
    return float(kxx + kyy - 2.0 * kxy)


def _thinned(draws: np.ndarray, points: int) -> np.ndarray:
    """``draws`` (chains, n, dim) pooled and evenly thinned to at most ``points`` rows."""
    flat = draws.reshape(-1, draws.shape[-1])
    step = max(1, math.ceil(len(flat) / points))
    return flat[::step]


# ------------------------------------------------------------------------ reference


def reference(args: argparse.Namespace) -> None:
    target = GlassGPC(seed=args.seed)
    started = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        result = kameleon.sample(
            target,
            dim=DIM,
            algorithm=args.algorithm,
            chains=args.chains,
            iterations=args.iterations,
            warmup=args.warmup,
            seed=args.seed,
            progress=False,
            initial=np.zeros(DIM),
        )
    seconds = time.perf_counter() - started
    thinned = result.draws[:, :: args.thin, :]
    sample = thinned.reshape(-1, DIM)
    np.save(args.out, sample)
    row = {
        "algorithm": args.algorithm,
        "chains": args.chains,
        "warmup": args.warmup,
        "iterations": args.iterations,
        "thin": args.thin,
        "seed": args.seed,
        "points": len(sample),
        "seconds": round(seconds, 1),
        "acceptance": round(float(np.mean(result.acceptance)), 3),
        "max_rhat": round(float(np.max(result.r_hat)), 4),
        "min_ess_bulk": round(float(np.min(result.ess_bulk)), 1),
        "median_ess_bulk": round(float(np.median(result.ess_bulk)), 1),
        "min_ess_bulk_thinned": round(float(np.min(per_parameter(ess_bulk, thinned))), 1),
        "mean": [round(float(v), 4) for v in sample.mean(0)],
        "sd": [round(float(v), 4) for v in sample.std(0)],
        "bandwidth": round(median_bandwidth(sample), 4),
        "warnings": sorted({f.code for f in result.warnings}),
    }
    args.out.with_suffix(".json").write_text(json.dumps(row, indent=1) + "\n")
    print(json.dumps(row))


# -------------------------------------------------------------------------- service


@contextmanager
def serving() -> Iterator[str]:
    """``kameleon serve`` on the memory store, on a free loopback port; its URL."""
    port = free_port()
    argv = [KAMELEON, "serve", "--port", str(port), "--store", "memory", "--log-level", "warning"]
    with running(argv, port, lambda client: client.get("/v1/health/live")):
        yield f"http://127.0.0.1:{port}"


class Counted:
    """A log density that counts its evaluations (thread-safe)."""

    def __init__(self, fn: GlassGPC) -> None:
        self.fn = fn
        self.evaluations = 0
        self._lock = threading.Lock()

    def __call__(self, theta: np.ndarray) -> float:
        with self._lock:
            self.evaluations += 1
        return self.fn(theta)


def one_run(
    url: str, algorithm: str, options: dict[str, Any], args: argparse.Namespace
) -> tuple[dict[str, Any], np.ndarray]:
    """One session through the service; its row and its post-warm-up draws."""
    target = Counted(GlassGPC(seed=args.seed))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        result = kameleon.sample(
            target,
            dim=DIM,
            algorithm=algorithm,
            chains=args.chains,
            iterations=args.iterations,
            warmup=args.warmup,
            url=url,
            workers=args.workers,
            seed=args.seed,
            progress=False,
            pseudo_marginal=True,
            initial=np.zeros(DIM),
            **options,
        )
    seconds = time.perf_counter() - started
    return {
        "algorithm": algorithm,
        "options": options,
        "chains": args.chains,
        "warmup": args.warmup,
        "iterations": args.iterations,
        "workers": args.workers,
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "evaluations": target.evaluations,
        "acceptance": round(float(np.mean(result.acceptance)), 3),
        "max_rhat": round(float(np.max(result.r_hat)), 3),
        "min_ess_bulk": round(float(np.min(result.ess_bulk)), 1),
        "median_ess_bulk": round(float(np.median(result.ess_bulk)), 1),
        "warnings": sorted({f.code for f in result.warnings}),
    }, result.draws


def curves(
    draws: np.ndarray, ref: np.ndarray, bandwidth: float, prefixes: list[int], points: int
) -> list[dict[str, float]]:
    """At each prefix of the post-warm-up draws (per chain): the MMD to the reference and
    the minimum and median bulk ESS."""
    out = []
    for n in prefixes:
        part = draws[:, :n]
        ess = per_parameter(ess_bulk, part)
        out.append(
            {
                "iterations": n,
                "mmd2": mmd2(_thinned(part, points), ref, bandwidth),
                "min_ess_bulk": float(np.min(ess)),
                "median_ess_bulk": float(np.median(ess)),
                "max_rhat": float(np.max(per_parameter(rhat, part))),
            }
        )
    return out


def service(args: argparse.Namespace) -> None:
    ref = np.load(args.reference)
    bandwidth = median_bandwidth(ref)
    half = len(ref) // 2
    floor = mmd2(ref[:half], ref[half:], bandwidth)  # the reference's halves: the noise floor
    prefixes = [n for n in (125, 250, 500, 1000, 2000, 4000, 8000) if n < args.iterations]
    prefixes.append(args.iterations)
    runs: list[tuple[str, dict[str, Any]]] = []
    for algorithm in args.algorithms.split(","):
        for setting in args.preconditioning.split(","):
            if algorithm not in PRECONDITIONED and setting != "default":
                continue
            runs.append((algorithm, {} if setting == "default" else {"preconditioning": setting}))
    rows: list[dict[str, Any]] = []
    doc = {"bandwidth": bandwidth, "mmd2_reference_halves": floor, "runs": rows}
    with threadpool_limits(limits=1, user_api="blas"), serving() as url:
        for algorithm, options in runs:
            row, draws = one_run(url, algorithm, options, args)
            row["curve"] = curves(draws, ref, bandwidth, prefixes, args.mmd_points)
            row["mmd2"] = row["curve"][-1]["mmd2"]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
            if args.out is not None:  # after every run: a long benchmark keeps what it made
                args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc))


def _label(row: dict[str, Any]) -> str:
    setting = row["options"].get("preconditioning")
    return f"{row['algorithm']}, `preconditioning` {setting}" if setting else row["algorithm"]


def table(doc: dict[str, Any]) -> str:
    lines = [
        "| sampler | acceptance | min bulk ESS | median bulk ESS | max R-hat | min ESS per 1 000 "
        "evaluations | MMD^2 to the reference | seconds | warnings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["runs"]:
        per = 1000 * row["min_ess_bulk"] / row["evaluations"]
        lines.append(
            f"| {_label(row)} | {row['acceptance']:.3f} | {row['min_ess_bulk']:.0f} | "
            f"{row['median_ess_bulk']:.0f} | {row['max_rhat']:.3f} | {per:.2f} | "
            f"{row['mmd2']:.4f} | {row['seconds']:.0f} | {', '.join(row['warnings']) or 'none'} |"
        )
    lines.append(
        f"\n(MMD^2 between the reference sample's two halves: {doc['mmd2_reference_halves']:.4f}; "
        f"bandwidth {doc['bandwidth']:.3f}.)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- plots

COLOURS = {
    "rwm": "tab:grey",
    "am": "tab:blue",
    "kameleon": "tab:green",
    "kmc-lite": "tab:red",
    "kmc-finite": "tab:purple",
}


def plot(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(args.results.read_text())
    runs = doc["runs"]
    budget = f"{runs[0]['chains']} chains, {runs[0]['warmup']} warm-up, seed {runs[0]['seed']}"

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in runs:
        n = [c["iterations"] for c in row["curve"]]
        ax.plot(n, [c["mmd2"] for c in row["curve"]], **_style(row), label=_plain_label(row))
    ax.axhline(doc["mmd2_reference_halves"], color="black", lw=0.8, ls=":")
    ax.text(
        runs[0]["curve"][0]["iterations"], doc["mmd2_reference_halves"] * 1.08,
        "the reference's two halves", fontsize=8,
    )  # fmt: skip
    ax.set(
        xscale="log", yscale="log", xlabel="iterations per chain after warm-up",
        ylabel="MMD$^2$ to the reference (Gaussian kernel)",
        title=f"Glass GP classification through the service ({budget})",
    )  # fmt: skip
    _iteration_ticks(ax, runs)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(args.prefix.with_name(args.prefix.name + "-mmd.png"), dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for key, ax in zip(("min_ess_bulk", "median_ess_bulk"), axes, strict=True):
        for row in runs:
            n = [c["iterations"] for c in row["curve"]]
            ax.plot(n, [c[key] for c in row["curve"]], **_style(row), label=_plain_label(row))
        ax.set(
            xscale="log", yscale="log", xlabel="iterations per chain after warm-up",
            title=("minimum" if key.startswith("min_") else "median") + " bulk ESS over the 9 "
            "parameters",
        )  # fmt: skip
        _iteration_ticks(ax, runs)
    axes[0].set_ylabel(f"bulk ESS, {runs[0]['chains']} chains pooled")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Glass GP classification through the service ({budget})")
    fig.tight_layout()
    fig.savefig(args.prefix.with_name(args.prefix.name + "-ess.png"), dpi=110)


def _iteration_ticks(ax: Any, runs: list[dict[str, Any]]) -> None:
    """The prefixes as the x axis's only ticks, in plain numbers."""
    from matplotlib.ticker import NullFormatter

    ticks = [c["iterations"] for c in runs[0]["curve"]]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _plain_label(row: dict[str, Any]) -> str:
    setting = row["options"].get("preconditioning")
    return f"{row['algorithm']}, {setting}" if setting else row["algorithm"]


def _style(row: dict[str, Any]) -> dict[str, Any]:
    none = row["options"].get("preconditioning") == "none"
    return {"color": COLOURS[row["algorithm"]], "ls": "--" if none else "-", "marker": "o", "ms": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ref = commands.add_parser("reference", help="the reference sample, in process")
    ref.add_argument("--algorithm", default="am")
    ref.add_argument("--chains", type=int, default=8)
    ref.add_argument("--warmup", type=int, default=3000)
    ref.add_argument("--iterations", type=int, default=15000)
    ref.add_argument("--thin", type=int, default=60)
    ref.add_argument("--seed", type=int, default=1)
    ref.add_argument("--out", type=Path, default=ROOT / "bench/results/glass-reference.npy")
    run = commands.add_parser("service", help="every sampler through a service")
    run.add_argument("--algorithms", default=",".join(ALGORITHMS))
    run.add_argument("--preconditioning", default="none,default")
    run.add_argument("--chains", type=int, default=4)
    run.add_argument("--warmup", type=int, default=1000)
    run.add_argument("--iterations", type=int, default=4000, help="kept after warm-up")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--mmd-points", type=int, default=2000)
    run.add_argument("--reference", type=Path, default=ROOT / "bench/results/glass-reference.npy")
    run.add_argument("--out", type=Path, default=None)
    draw = commands.add_parser("plot", help="the MMD and ESS curves, as PNG")
    draw.add_argument("--results", type=Path, default=ROOT / "bench/results/glass.json")
    draw.add_argument("--prefix", type=Path, default=ROOT / "bench/results/glass")
    args = parser.parse_args()
    if args.command == "reference":
        reference(args)
    elif args.command == "service":
        service(args)
    else:
        plot(args)


if __name__ == "__main__":
    main()
