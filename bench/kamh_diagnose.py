"""KAMH's kernel steps before and after warm-up, one chain at a time.

    .venv/bin/python bench/kamh_diagnose.py [--target offset-gaussian-9d] [--seed 1] \
        [--chains 0,1,2,3] [--warmup 1000] [--iterations 2000] [--window 250] \
        [--options '{"bandwidth": 10}'] [--nu2 3,10] [--out FILE]

Runs ``kameleon`` chains by its ``ask`` and ``tell`` from the origin on a target of
:mod:`bench.kernels_bench` and reports, per window of iterations, for the kernel method's
own steps only (not scouting, not the mixture's random walk): their mean acceptance
probability, the median ``|log q(x | x*) - log q(x* | x)|`` of their proposals, ``nu^2``,
the bandwidth and the subsample's size at the window's end. At the end of warm-up, and at
the end of the run, it gives the spread of ``log det R_y`` (the proposal covariance, in
whitened coordinates) over the frozen subsample's points and over the chain's
post-warm-up states (5 %, 50 %, 95 % quantiles), the trace of ``R_y`` over the same
points, and the squared distance, in bandwidths, from each post-warm-up state to its
nearest subsample point. With ``--nu2``, each chain's state at the end of warm-up is also
run on with each of the given ``nu^2`` instead of its own (the rest of the state frozen
as it is), and the kernel steps' mean acceptance after warm-up is reported for each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_bench import TARGETS

from kameleon.core import SAMPLERS
from kameleon.core.kernels.kamh_proposal import covariance_cholesky, log_det_cholesky
from kameleon.core.kernels.rkhs import gaussian_kernel_grad
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.tuning import preconditioning


def proposal_covariance_stats(state: Any, params: Any, points: np.ndarray) -> dict[str, Any]:
    """``log det R_y`` and ``tr R_y / d`` at whitened ``points`` for ``state``'s ``(Z, l, nu^2)``."""
    Z = state.reservoir if state.subsample is None else state.subsample
    bandwidth = state.bandwidth
    scale2 = exp1(state.log_nu2) * bandwidth**4 / Z.shape[0]
    gamma = params.nugget if hasattr(params, "nugget") else params.gamma  # before: gamma
    log_dets, traces = [], []
    for y in points:
        M = gaussian_kernel_grad(np.asarray(y, dtype=float), Z, bandwidth)
        L = covariance_cholesky(gamma * gamma, scale2, M)
        log_dets.append(log_det_cholesky(L))
        traces.append(float(np.sum(L * L)) / len(y))
    q = [0.05, 0.5, 0.95]
    return {
        "log_det_R": [round(float(v), 2) for v in np.quantile(log_dets, q)],
        "trace_R_per_dim": [round(float(v), 4) for v in np.quantile(traces, q)],
    }


def _post_warmup_acceptance(target: Any, params: Any, state: Any, total: int) -> float:
    """The kernel steps' mean acceptance from ``state`` (at the end of warm-up) to ``total``."""
    sampler = SAMPLERS["kameleon"]
    acc = []
    while state.iteration < total:
        kernel_step = not preconditioning.is_random_walk(state, params)
        proposal = sampler.ask(state, params)
        value = float(target.logdensity(np.asarray(proposal.position)))
        state, info = sampler.tell(state, params, proposal, value)
        if kernel_step:
            acc.append(info.acceptance_probability)
    return round(float(np.mean(acc)), 3)


def run_chain(
    target: Any,
    params: Any,
    *,
    seed: int,
    chain: int,
    total: int,
    window: int,
    nu2: tuple[float, ...] = (),
) -> dict[str, Any]:
    sampler = SAMPLERS["kameleon"]
    state = sampler.init(np.zeros(target.dim), params, seed=seed, chain=chain)
    windows: list[dict[str, Any]] = []
    acc: list[float] = []
    corr: list[float] = []
    post: list[np.ndarray] = []
    warmup_end: dict[str, Any] = {}
    while state.iteration < total:
        kernel_step = (
            state.logdensity is not None
            and state.preconditioner is not None
            and not preconditioning.is_scouting(state, params)
            and not preconditioning.is_random_walk(state, params)
            and state.bandwidth is not None
        )
        proposal = sampler.ask(state, params)
        value = float(target.logdensity(np.asarray(proposal.position)))
        state, info = sampler.tell(state, params, proposal, value)
        if proposal.kind == "init":
            continue
        t = info.iteration
        if kernel_step:
            acc.append(info.acceptance_probability)
            corr.append(abs(proposal.log_correction))
        if t > params.warmup:
            post.append(np.asarray(state.position))
        if t % window == 0:
            windows.append(
                {
                    "end": t,
                    "kernel_steps": len(acc),
                    "acceptance": round(float(np.mean(acc)), 3) if acc else None,
                    "median_abs_log_correction": round(float(np.median(corr)), 2) if corr else None,
                    "nu2": round(exp1(state.log_nu2), 3),
                    "bandwidth": None if state.bandwidth is None else round(state.bandwidth, 3),
                    "subsample": int(
                        (state.reservoir if state.subsample is None else state.subsample).shape[0]
                    ),
                }
            )
            acc, corr = [], []
        if t == params.warmup:
            Z = state.reservoir if state.subsample is None else state.subsample
            warmup_end = {"at_subsample": proposal_covariance_stats(state, params, Z)}
            if nu2:
                warmup_end["acceptance_after_by_nu2"] = {
                    str(v): _post_warmup_acceptance(
                        target, params, dataclasses.replace(state, log_nu2=log1(v)), total
                    )
                    for v in nu2
                }
    Z = state.reservoir if state.subsample is None else state.subsample
    pre = state.preconditioner
    whitened = np.array([pre.whiten(x) for x in post])
    sq = ((whitened[:, None, :] - Z[None, :, :]) ** 2).sum(-1).min(1) / state.bandwidth**2
    return {
        "chain": chain,
        "windows": windows,
        "warmup_end": warmup_end,
        "post_warmup_states": proposal_covariance_stats(state, params, whitened[::10]),
        "nearest_subsample_point_sq_bandwidths": [
            round(float(v), 2) for v in np.quantile(sq, [0.05, 0.5, 0.95])
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="offset-gaussian-9d")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chains", default="0,1,2,3")
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--options", default="{}", help="kameleon options, JSON")
    parser.add_argument("--nu2", default="", help="nu^2 values to run on with, e.g. 3,10")
    parser.add_argument("--out", default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    target = TARGETS[args.target]
    options = json.loads(args.options)
    params = SAMPLERS["kameleon"].make_params(target.dim, options, warmup=args.warmup)
    results = []
    with np.errstate(all="ignore"):
        for chain in (int(c) for c in args.chains.split(",")):
            r = run_chain(
                target,
                params,
                seed=args.seed,
                chain=chain,
                total=args.warmup + args.iterations,
                window=args.window,
                nu2=tuple(float(v) for v in args.nu2.split(",") if v),
            )
            results.append(r)
            print(f"chain {chain}")
            for w in r["windows"]:
                print("  ", json.dumps(w))
            print("   warm-up end, at Z:", json.dumps(r["warmup_end"]))
            print("   post-warm-up states:", json.dumps(r["post_warmup_states"]))
            print(
                "   nearest Z point (squared bandwidths):",
                r["nearest_subsample_point_sq_bandwidths"],
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"args": vars(args), "chains": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
