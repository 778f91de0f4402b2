"""Kameleon's gradient samplers (nuts, hmc, mala) against BlackJAX NUTS, in process.

    .venv/bin/python bench/gradients_bench.py [--seeds 1,2,3] [--chains 4] [--warmup 1000] \
        [--iterations 1000] [--targets gauss10,gauss100,logistic,funnel10] \
        [--samplers nuts-diag,nuts-dense,hmc-dense,mala-dense,bj-diag,bj-dense] \
        [--out bench/results/gradients.json]
    .venv/bin/python bench/gradients_bench.py --table bench/results/gradients.json

The anchor, BlackJAX NUTS after its window adaptation, is not a dependency of Kameleon:
install it in the bench's environment only, ``pip install blackjax==1.7.1`` (it pulls
jax; the CPU build is enough). Without it the ``bj-*`` rows are skipped with a message.
The logistic regression needs scikit-learn's breast-cancer data (``pip install
scikit-learn``); without it a generated data set of the same shape (seed 0) is used and
the results say so.

Targets, each with its exact gradient in numpy (and in JAX for BlackJAX), float64:

- ``gauss10``/``gauss100``: a zero-mean Gaussian whose covariance has eigenvalues
  log-spaced over [1e-2, 1e2] (condition number 1e4), its axes rotated by a fixed random
  orthogonal matrix (QR of a standard normal matrix, seed 0).
- ``logistic``: Bayesian logistic regression on the breast-cancer data (569 x 30,
  features standardised, an intercept added: d = 31), prior N(0, 10^2) on every
  coefficient.
- ``funnel10``: Neal's funnel, v ~ N(0, 3^2), x_1..x_9 ~ N(0, e^v) (d = 10).

Per target, sampler and seed: ``--chains`` chains, ``--warmup`` warm-up and
``--iterations`` sampling transitions each, every chain from a point uniform in
(-2, 2)^d (Kameleon's own draw; BlackJAX's from ``numpy.random.default_rng(seed)``).
The figure of merit is the minimum over coordinates of the bulk ESS
(``core.diagnostics.summary.ess_bulk`` on both samplers' post-warm-up draws) per 1000 gradient
evaluations of the sampling phase. Kameleon: each chain is advanced with the runner of
``core.running.inprocess.sample_chains`` (the same draws, bit for bit: ``--check`` asserts it), first
its warm-up, then its sampling one transition at a time; the sampling phase's gradients
are the difference of the state's ``evaluations`` (so neither the initial point nor the
gradient check is counted). BlackJAX: the sum of ``info.num_integration_steps`` over
the sampling phase. Also recorded: wall time (warm-up and sampling; BlackJAX's after
compilation, which is timed apart), mean tree depth, divergences after warm-up, the
minimum bulk ESS of the squares, and for the Gaussians the largest error of the mean
and of the variances along the principal axes against the truth.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.summary import ess_bulk, per_parameter, rhat
from kameleon.core.numerics.linalg import single_threaded_blas
from kameleon.core.running.chains import Runner

FloatArray = npt.NDArray[np.float64]
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    name: str
    dim: int
    fn: Callable[[FloatArray], tuple[float, FloatArray]]
    jax_logdensity: Callable[[Any], Any] | None  # built lazily: jax may be missing
    covariance: FloatArray | None = None  # the truth, for the Gaussians
    note: str = ""


def gaussian(dim: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Precision, covariance and rotation of the rotated Gaussian of condition number 1e4."""
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, dim)))
    eig = np.logspace(-2.0, 2.0, dim)
    covariance = q @ np.diag(eig) @ q.T
    precision = q @ np.diag(1.0 / eig) @ q.T
    return 0.5 * (precision + precision.T), 0.5 * (covariance + covariance.T), q


def make_gaussian(dim: int) -> Target:
    precision, covariance, _ = gaussian(dim)

    def fn(x: FloatArray) -> tuple[float, FloatArray]:
        g = -(precision @ x)
        return 0.5 * float(x @ g), g

    def jax_ld(x: Any) -> Any:
        import jax.numpy as jnp

        return -0.5 * x @ (jnp.asarray(precision) @ x)

    return Target(f"gauss{dim}", dim, fn, jax_ld, covariance)


def breast_cancer() -> tuple[FloatArray, FloatArray, str]:
    try:
        from sklearn.datasets import load_breast_cancer  # type: ignore[import-not-found]

        data = load_breast_cancer()
        x, y, note = np.asarray(data.data, float), np.asarray(data.target, float), ""
    except ImportError:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((569, 30))
        y = (rng.random(569) < 1 / (1 + np.exp(-x @ rng.standard_normal(30)))).astype(float)
        note = "scikit-learn missing: a generated data set (569 x 30, seed 0)"
    x = (x - x.mean(0)) / x.std(0)
    return np.hstack([np.ones((x.shape[0], 1)), x]), y, note


def make_logistic(prior_sd: float = 10.0) -> Target:
    design, y, note = breast_cancer()

    def fn(beta: FloatArray) -> tuple[float, FloatArray]:
        eta = design @ beta
        # log p = sum y eta - log(1 + e^eta), stably
        ll = float(y @ eta - np.logaddexp(0.0, eta).sum())
        p = 0.5 * (1.0 + np.tanh(0.5 * eta))  # the logistic function, without overflow
        lp = ll - 0.5 * float(beta @ beta) / prior_sd**2
        return lp, design.T @ (y - p) - beta / prior_sd**2

    def jax_ld(beta: Any) -> Any:
        import jax.numpy as jnp

        eta = jnp.asarray(design) @ beta
        ll = jnp.asarray(y) @ eta - jnp.logaddexp(0.0, eta).sum()
        return ll - 0.5 * beta @ beta / prior_sd**2

    return Target("logistic", design.shape[1], fn, jax_ld, None, note)


def make_funnel(dim: int = 10) -> Target:
    def fn(z: FloatArray) -> tuple[float, FloatArray]:
        v, x = z[0], z[1:]
        k = dim - 1
        ex = math.exp(-v)
        lp = -v * v / 18.0 - 0.5 * k * v - 0.5 * ex * float(x @ x)
        g = np.empty(dim)
        g[0] = -v / 9.0 - 0.5 * k + 0.5 * ex * float(x @ x)
        g[1:] = -ex * x
        return lp, g

    def jax_ld(z: Any) -> Any:
        import jax.numpy as jnp

        v, x = z[0], z[1:]
        return -(v**2) / 18.0 - 0.5 * (dim - 1) * v - 0.5 * jnp.exp(-v) * x @ x

    return Target(f"funnel{dim}", dim, fn, jax_ld)


def make_normal(dim: int) -> Target:
    """A standard normal: gauss10 whitened exactly, where the identity is the right metric
    (``nuts-unit``), to see the sampler without its metric adaptation."""

    def fn(x: FloatArray) -> tuple[float, FloatArray]:
        return -0.5 * float(x @ x), -x

    def jax_ld(x: Any) -> Any:
        return -0.5 * x @ x

    return Target(f"normal{dim}", dim, fn, jax_ld, np.eye(dim))


TARGETS: dict[str, Callable[[], Target]] = {
    "gauss10": lambda: make_gaussian(10),
    "gauss100": lambda: make_gaussian(100),
    "logistic": make_logistic,
    "funnel10": lambda: make_funnel(10),
    "normal10": lambda: make_normal(10),
}

# name -> (algorithm, options); the bj- rows are BlackJAX NUTS.
KAMELEON: dict[str, tuple[str, dict[str, Any]]] = {
    "nuts-diag": ("nuts", {"metric": "diag"}),
    "nuts-dense": ("nuts", {"metric": "dense"}),
    "nuts-unit": ("nuts", {"metric": "unit"}),
    "hmc-diag": ("hmc", {"metric": "diag"}),
    "hmc-dense": ("hmc", {"metric": "dense"}),
    "mala-diag": ("mala", {"metric": "diag"}),
    "mala-dense": ("mala", {"metric": "dense"}),
}
BLACKJAX = {"bj-diag": True, "bj-dense": False}  # is_mass_matrix_diagonal


def measures(draws: FloatArray, gradients: int, target: Target) -> dict[str, float]:
    """The figures of one run from its post-warm-up draws, shape (chains, n, dim)."""
    ess = per_parameter(ess_bulk, draws)
    ess_sq = per_parameter(ess_bulk, draws**2)
    out = {
        "min_ess_bulk": float(np.min(ess)),
        "min_ess_bulk_sq": float(np.min(ess_sq)),
        "ess_per_1k_grad": 1000.0 * float(np.min(ess)) / gradients,
        "ess_sq_per_1k_grad": 1000.0 * float(np.min(ess_sq)) / gradients,
        "max_rhat": float(np.max(per_parameter(rhat, draws))),
        "sampling_gradients": gradients,
    }
    if target.covariance is not None:
        eig, q = np.linalg.eigh(target.covariance)
        along = draws.reshape(-1, target.dim) @ q  # coordinates along the principal axes
        out["max_mean_error_sd"] = float(np.max(np.abs(along.mean(0)) / np.sqrt(eig)))
        ratio = along.var(0) / eig
        out["var_ratio_min"] = float(ratio.min())
        out["var_ratio_max"] = float(ratio.max())
    return out


def run_kameleon(
    target: Target, name: str, seed: int, chains: int, warmup: int, iterations: int
) -> dict[str, Any]:
    algorithm, options = KAMELEON[name]
    sampler = SAMPLERS[algorithm]
    draws, grads, depths, divergences, steps = [], 0, [], 0, []
    started = time.perf_counter()
    with single_threaded_blas(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = sampler.make_params(target.dim, options, warmup=warmup)
        for c in range(chains):
            runner = Runner(
                sampler, params, target.fn, None, warmup + iterations, seed=seed, chain=c
            )
            runner.advance(warmup)
            before = runner.state.evaluations
            for _ in range(iterations):
                runner.advance(1)
                s = runner.state
                if hasattr(s, "tree_depth"):
                    depths.append(s.tree_depth)
                    divergences += bool(s.diverging)
                    steps.append(s.n_steps)
            grads += runner.state.evaluations - before
            draws.append(runner.result().draws[warmup:])
    wall = time.perf_counter() - started
    out = measures(np.stack(draws), grads, target)
    out.update(wall_s=wall, divergences=divergences)
    if depths:
        out["mean_tree_depth"] = float(np.mean(depths))
        out["reported_divergences"] = int(runner.state.divergences)  # the last chain's own
    return out


def check_same_draws(target: Target, seed: int) -> None:
    """The runner advanced as above makes sample_chains' draws, bit for bit."""
    from kameleon.core.running.inprocess import sample_chains

    chains, warmup, iterations = 2, 60, 40
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sample_chains(
            target.fn,
            target.dim,
            algorithm="nuts",
            chains=chains,
            warmup=warmup,
            iterations=iterations,
            seed=seed,
            options={"metric": "dense"},
        )
    sampler = SAMPLERS["nuts"]
    params = sampler.make_params(target.dim, {"metric": "dense"}, warmup=warmup)
    for c in range(chains):
        with single_threaded_blas():
            runner = Runner(
                sampler, params, target.fn, None, warmup + iterations, seed=seed, chain=c
            )
            runner.advance(warmup)
            for _ in range(iterations):
                runner.advance(1)
        assert np.array_equal(runner.result().draws, ref[c].draws)
        assert runner.state.evaluations == ref[c].state.evaluations
    print("check: the stepped runner makes sample_chains' draws, bit for bit", flush=True)


def have_blackjax() -> bool:
    try:
        import blackjax  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


_COMPILED: dict[tuple[str, str, int, int], Any] = {}


def run_blackjax(
    target: Target, name: str, seed: int, chains: int, warmup: int, iterations: int
) -> dict[str, Any]:
    import blackjax
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    diagonal = BLACKJAX[name]
    key_ = (target.name, name, warmup, iterations)
    compile_s = 0.0
    if key_ not in _COMPILED:
        ld = target.jax_logdensity
        assert ld is not None

        def one_chain(key: Any, x0: Any) -> Any:
            k_warm, k_sample = jax.random.split(key)
            adapt = blackjax.window_adaptation(
                blackjax.nuts, ld, is_mass_matrix_diagonal=diagonal, target_acceptance_rate=0.8
            )
            (state, parameters), _ = adapt.run(k_warm, x0, num_steps=warmup)
            kernel = blackjax.nuts(ld, **parameters)

            def body(s: Any, k: Any) -> Any:
                s, info = kernel.step(k, s)
                return s, (
                    s.position,
                    info.num_integration_steps,
                    info.num_trajectory_expansions,
                    info.is_divergent,
                )

            _, out = jax.lax.scan(body, state, jax.random.split(k_sample, iterations))
            return out

        t = time.perf_counter()
        _COMPILED[key_] = (
            jax.jit(one_chain)
            .lower(jax.random.key(0), jnp.zeros(target.dim, dtype=jnp.float64))
            .compile()
        )
        compile_s = time.perf_counter() - t
    compiled = _COMPILED[key_]
    rng = np.random.default_rng(seed)
    keys = jax.random.split(jax.random.key(seed), chains)
    draws, grads, depths, divergences = [], 0, [], 0
    started = time.perf_counter()
    for c in range(chains):
        x0 = jnp.asarray(rng.uniform(-2.0, 2.0, target.dim))
        pos, n_steps, depth, divergent = jax.block_until_ready(compiled(keys[c], x0))
        draws.append(np.asarray(pos))
        grads += int(np.sum(n_steps))
        depths.append(np.asarray(depth))
        divergences += int(np.sum(divergent))
    wall = time.perf_counter() - started
    out = measures(np.stack(draws), grads, target)
    out.update(
        wall_s=wall,
        compile_s=compile_s,
        divergences=divergences,
        mean_tree_depth=float(np.mean(np.concatenate(depths))),
    )
    return out


def median_row(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k in runs[0] if all(isinstance(r.get(k), int | float) for r in runs)]
    return {k: float(statistics.median(float(r[k]) for r in runs)) for k in keys}


def table(path: Path) -> str:
    data = json.loads(path.read_text())
    lines = [
        "| target | sampler | ESS/1k grad | ratio to bj same metric | ESS(x^2)/1k grad | "
        "max R-hat | mean tree depth | divergences | wall (s) | var/truth |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tname, rows in data["results"].items():
        med = {s: median_row(runs) for s, runs in rows.items() if runs}
        for s, m in med.items():
            anchor = None
            if not s.startswith("bj-"):
                metric = "diag" if s.endswith("diag") else "dense"
                anchor = med.get(f"bj-{metric}")
            ratio = f"{m['ess_per_1k_grad'] / anchor['ess_per_1k_grad']:.2f}" if anchor else ""
            depth = f"{m['mean_tree_depth']:.2f}" if "mean_tree_depth" in m else ""
            truth = (
                f"{m['var_ratio_min']:.2f}..{m['var_ratio_max']:.2f}"
                if "var_ratio_min" in m
                else ""
            )
            lines.append(
                f"| {tname} | {s} | {m['ess_per_1k_grad']:.2f} | {ratio} | "
                f"{m['ess_sq_per_1k_grad']:.2f} | {m['max_rhat']:.3f} | {depth} | "
                f"{m['divergences']:.0f} | {m['wall_s']:.1f} | {truth} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--targets", default="gauss10,gauss100,logistic,funnel10")
    parser.add_argument(
        "--samplers", default="nuts-diag,nuts-dense,hmc-dense,mala-dense,bj-diag,bj-dense"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gradients.json"))
    parser.add_argument("--check", action="store_true", help="assert sample_chains' draws first")
    parser.add_argument("--table", help="print the Markdown table of a results file and exit")
    args = parser.parse_args()
    if args.table:
        print(table(Path(args.table)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    samplers = args.samplers.split(",")
    if any(s.startswith("bj-") for s in samplers) and not have_blackjax():
        print(
            "BlackJAX is not installed: the anchor rows (bj-*) are skipped; "
            "install it with `pip install blackjax==1.7.1`",
            file=sys.stderr,
        )
        samplers = [s for s in samplers if not s.startswith("bj-")]
    out_path = Path(args.out)
    data: dict[str, Any] = (
        json.loads(out_path.read_text()) if out_path.exists() else {"results": {}}
    )
    versions = {"python": sys.version.split()[0], "numpy": np.__version__, "cpus": os.cpu_count()}
    if have_blackjax():
        import blackjax
        import jax

        versions.update(blackjax=blackjax.__version__, jax=jax.__version__)
    data["versions"] = versions
    budget = {"chains": args.chains, "warmup": args.warmup, "iterations": args.iterations}
    for tname in args.targets.split(","):
        target = TARGETS[tname]()
        if args.check:
            check_same_draws(target, seeds[0])
        rows = data["results"].setdefault(tname, {})
        data.setdefault("budget", {})[tname] = budget
        if target.note:
            data.setdefault("notes", {})[tname] = target.note
        for s in samplers:
            runs = []
            for seed in seeds:
                run = run_blackjax if s.startswith("bj-") else run_kameleon
                r = run(target, s, seed, args.chains, args.warmup, args.iterations)
                r["seed"] = seed
                runs.append(r)
                print(
                    f"{tname} {s} seed {seed}: ESS/1k {r['ess_per_1k_grad']:.2f}, "
                    f"grads {r['sampling_gradients']}, wall {r['wall_s']:.1f}s, "
                    f"depth {r.get('mean_tree_depth', float('nan')):.2f}, "
                    f"div {r['divergences']}, rhat {r['max_rhat']:.3f}"
                    + (
                        f", var ratio {r['var_ratio_min']:.2f}..{r['var_ratio_max']:.2f}"
                        if "var_ratio_min" in r
                        else ""
                    ),
                    flush=True,
                )
            rows[s] = runs
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(data, indent=2) + "\n")
    print(table(out_path))


if __name__ == "__main__":
    main()
