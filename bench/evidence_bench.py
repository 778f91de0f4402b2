"""The log evidence of targets whose normalising constant is known: every Kameleon
evidence sampler (``importance``, ``smc``, ``tempering``) beside dynesty (static nested
sampling) and pocoMC (preconditioned Monte Carlo), in process, side by side, every
likelihood evaluation counted by the same wrapper.

    .venv/bin/python bench/evidence_bench.py [--seeds 1,2,3] [--targets gauss10,...] \
        [--samplers importance,smc,...] [--out bench/results/evidence.json]
    .venv/bin/python bench/evidence_bench.py --table bench/results/evidence.json

The anchors are not dependencies of Kameleon: ``pip install dynesty==3.1.0
pocomc==1.2.6`` in the bench's environment (without them their rows are skipped with a
message).

Each target is a prior times a likelihood; the log evidence is
``log Z = log integral prior(x) L(x) dx``:

- ``gauss10``: a 10-d correlated Gaussian likelihood (condition number about 100, seed
  0) under the uniform prior on (-10, 10)^10: ``log Z = log((2 pi)^5 |S|^(1/2)) -
  10 log 20`` (the mass outside the box is below 1e-20).
- ``mixture4``: an equal mixture of two unit Gaussians in 4-d, means at -6 and +6 in
  every coordinate (12 sd apart along each axis), uniform prior on (-10, 10)^4:
  ``log Z = -4 log 20`` (each component integrates to 1). Modes: the share of the
  mass at x0 > 0 (truth 0.5).
- ``eggbox``: dynesty's test, ``L = exp((2 + cos(x / 2) cos(y / 2))^5)``, uniform prior
  on (0, 10 pi)^2, ``log Z = 235.856`` (dynesty's reference figure). Its 18 narrow
  peaks sit at (2 pi k, 2 pi l), k + l even: 8 inside the box, 8 halved by its sides,
  2 quartered in its corners. Modes: the share of the 8 inside peaks (truth
  8 / 12.5 = 0.64), and how many of the 18 peaks hold at least a tenth of their share.
- ``shells``: two Gaussian shells in 2-d (radius 2, width 0.1, centres (-3.5, 0) and
  (3.5, 0)), uniform prior on (-6, 6)^2, Feroz and Hobson's test, ``log Z = -1.75``
  (their figure). Modes: the share at x0 > 0 (truth 0.5).
- ``logistic``: Bayesian logistic regression on a fixed synthetic data set (seed 3: 100
  points, an intercept and 4 standard normal features, labels drawn from the logistic
  model with coefficients (-0.5, 1, -1, 0.5, 0.25)), prior N(0, 2.5^2 I). Its log Z
  has no closed form: the reference is importance sampling with 4 000 000 draws of a
  Student-t (5 degrees of freedom) centred at the posterior mode with the inverse
  Hessian there (the Laplace approximation) times 1.5, log of the mean weight, with its
  standard error ``sd(w) / (sqrt(n) mean(w))`` (``reference_logistic``; about 1e-4).

Kameleon runs in process through ``kameleon.sample``. Its budget per target (``BUDGETS``)
is chosen per target and sampler from a first seed's run, and stated in BENCHMARKS.md.
``importance`` is told ``log prior + log L`` and starts its chains at draws of the prior;
``smc`` and ``tempering`` are told prior and likelihood apart (``tempered:
"likelihood"``); ``smc``'s particles start from the reference Gaussian
``N(centre, (half-width / 2)^2 I)`` of a box prior (the prior itself for the Gaussian
prior), bridged to the prior; ``smc-wf`` is ``smc`` with waste-free stages
(``waste_free``), told as ``smc``. dynesty: ``NestedSampler`` with 1000 live points, its
default sampling and bounds, ``dlogz`` 0.1 (as the issue's review). pocoMC: ``Sampler``
with its defaults, ``run()`` with its defaults. An evaluation is a call of the
likelihood: a point outside the prior's support, told with the log prior alone, is not
one (the Kameleon samplers' calls there are counted apart, ``outside``).

Reported per target and sampler, the median over seeds (and the range) of the error of
log Z, the error in units of the reported standard error, the evaluations, the mode
shares, and the warnings.
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
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

import kameleon

SAMPLER_NAMES = ("importance", "smc", "smc-wf", "tempering", "dynesty", "pocomc")


@dataclass(frozen=True)
class Target:
    """A prior (uniform on a box, or ``N(0, prior_sd^2 I)`` when ``prior_sd`` is set)
    times a likelihood, and its log evidence."""

    name: str
    dim: int
    low: float
    high: float
    log_likelihood: Callable[[np.ndarray], float]
    log_z: float
    prior_sd: float | None = None
    log_z_se: float = 0.0
    modes: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = field(
        default=None, compare=False
    )

    def log_prior(self, x: np.ndarray) -> float:
        if self.prior_sd is not None:
            v = self.prior_sd**2
            return -0.5 * float(x @ x) / v - 0.5 * self.dim * math.log(2 * math.pi * v)
        if np.all(x > self.low) and np.all(x < self.high):
            return -self.dim * math.log(self.high - self.low)
        return -math.inf

    def prior_draws(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.prior_sd is not None:
            return rng.normal(0.0, self.prior_sd, size=(n, self.dim))
        return rng.uniform(self.low, self.high, size=(n, self.dim))

    def reference(self) -> tuple[float, float]:
        """``smc``'s reference Gaussian (mean and sd of every coordinate)."""
        if self.prior_sd is not None:
            return 0.0, self.prior_sd
        return 0.5 * (self.low + self.high), 0.25 * (self.high - self.low)

    def prior_transform(self, u: np.ndarray) -> np.ndarray:
        if self.prior_sd is not None:
            from scipy.stats import norm

            return np.asarray(norm.ppf(u) * self.prior_sd)
        return self.low + (self.high - self.low) * u

    def scipy_prior(self) -> list[Any]:
        from scipy.stats import norm, uniform

        if self.prior_sd is not None:
            return [norm(0.0, self.prior_sd) for _ in range(self.dim)]
        return [uniform(self.low, self.high - self.low) for _ in range(self.dim)]


def _share(mask: np.ndarray, weights: np.ndarray) -> float:
    return float(np.sum(weights[mask]) / np.sum(weights))


def _halves(draws: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    return {"share": _share(draws[:, 0] > 0, weights)}


def _eggbox_modes(draws: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    k = np.rint(draws / (2 * math.pi)).astype(int)
    near = np.linalg.norm(draws - 2 * math.pi * k, axis=1) < 1.0
    inside = near & np.all((k >= 1) & (k <= 4), axis=1)
    found = 0
    for a in range(6):
        for b in range(6):
            if (a + b) % 2:
                continue
            part = (1.0 if 0 < a < 5 else 0.5) * (1.0 if 0 < b < 5 else 0.5)
            mass = _share(near & (k[:, 0] == a) & (k[:, 1] == b), weights)
            found += mass >= 0.1 * part / 12.5
    return {"share": _share(inside, weights), "found": float(found)}


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

    return Target("mixture4", d, -10, 10, ll, -d * math.log(20), modes=_halves)


def _eggbox() -> Target:
    def ll(x: np.ndarray) -> float:
        return float((2.0 + math.cos(x[0] / 2) * math.cos(x[1] / 2)) ** 5)

    return Target("eggbox", 2, 0, 10 * math.pi, ll, 235.856, modes=_eggbox_modes)


def _shells() -> Target:
    centres = np.array([[-3.5, 0.0], [3.5, 0.0]])
    r, w = 2.0, 0.1
    c = 1 / math.sqrt(2 * math.pi * w * w)

    def ll(x: np.ndarray) -> float:
        d = np.sqrt(np.sum((x - centres) ** 2, axis=1))
        terms = -((d - r) ** 2) / (2 * w * w)
        top = float(terms.max())
        return math.log(c) + top + math.log(float(np.sum(np.exp(terms - top))))

    return Target("shells", 2, -6, 6, ll, -1.75, modes=_halves)


#: The logistic regression's data: seed, points, true coefficients, prior sd.
LOGISTIC_SEED, LOGISTIC_N, LOGISTIC_BETA, LOGISTIC_PRIOR_SD = 3, 100, (-0.5, 1, -1, 0.5, 0.25), 2.5


def logistic_data(
    seed: int = LOGISTIC_SEED, n: int = LOGISTIC_N, beta: tuple[float, ...] = LOGISTIC_BETA
) -> tuple[np.ndarray, np.ndarray]:
    """The design (an intercept and standard normal features) and 0/1 labels."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, len(beta) - 1))])
    p = 1.0 / (1.0 + np.exp(-(x @ np.asarray(beta, dtype=float))))
    return x, (rng.random(n) < p).astype(float)


def logistic_log_likelihood(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The log likelihood at each row of ``b`` (shape ``(m, d)``), without overflow."""
    eta = b @ x.T
    return np.asarray(np.sum(y * eta - np.logaddexp(0.0, eta), axis=-1))


def reference_logistic(
    x: np.ndarray, y: np.ndarray, prior_sd: float, draws: int, seed: int = 0
) -> tuple[float, float]:
    """The log evidence of the logistic regression under ``N(0, prior_sd^2 I)`` and its
    standard error: importance sampling from a Student-t (5 degrees of freedom) at the
    posterior mode, scale the inverse Hessian there (the Laplace approximation) times
    1.5, in batches of 200 000."""
    d = x.shape[1]
    v = prior_sd**2
    b = np.zeros(d)
    for _ in range(100):  # Newton's method for the posterior mode
        p = 1.0 / (1.0 + np.exp(-(x @ b)))
        grad = x.T @ (y - p) - b / v
        hess = (x.T * (p * (1 - p))) @ x + np.eye(d) / v
        step = np.linalg.solve(hess, grad)
        b = b + step
        if np.max(np.abs(step)) < 1e-12:
            break
    cov = 1.5 * np.linalg.inv(hess)
    chol = np.linalg.cholesky(cov)
    nu = 5.0
    log_norm_t = (
        math.lgamma((nu + d) / 2)
        - math.lgamma(nu / 2)
        - 0.5 * d * math.log(nu * math.pi)
        - 0.5 * float(np.linalg.slogdet(cov)[1])
    )
    rng = np.random.default_rng(seed)
    chunks = []
    left = draws
    while left > 0:
        m = min(left, 200_000)
        left -= m
        z = rng.standard_normal((m, d)) / np.sqrt(rng.chisquare(nu, size=(m, 1)) / nu)
        s = b + z @ chol.T
        u = np.linalg.solve(chol, (s - b).T)
        log_q = log_norm_t - 0.5 * (nu + d) * np.log1p(np.sum(u * u, axis=0) / nu)
        log_prior = -0.5 * np.sum(s * s, axis=1) / v - 0.5 * d * math.log(2 * math.pi * v)
        chunks.append(logistic_log_likelihood(x, y, s) + log_prior - log_q)
    log_w = np.concatenate(chunks)
    top = float(log_w.max())
    w = np.exp(log_w - top)
    mean = float(w.mean())
    return top + math.log(mean), float(w.std() / (math.sqrt(w.size) * mean))


@cache
def _logistic() -> Target:
    x, y = logistic_data()
    log_z, se = reference_logistic(x, y, LOGISTIC_PRIOR_SD, 4_000_000)

    def ll(b: np.ndarray) -> float:
        return float(logistic_log_likelihood(x, y, b[None, :])[0])

    return Target("logistic", x.shape[1], -math.inf, math.inf, ll, log_z, LOGISTIC_PRIOR_SD, se)


#: In the order run (the slowest anchor run, dynesty's on gauss10, last).
TARGETS: dict[str, Callable[[], Target]] = {
    "shells": _shells,
    "eggbox": _eggbox,
    "mixture4": _mixture4,
    "logistic": _logistic,
    "gauss10": _gauss10,
}

#: Kameleon's budget per sampler and target: chains, warm-up, draws and options. The
#: rule: ``importance`` 16 chains, a warm-up of 2000 (4000 in 10-d, as PROTOCOL.md says)
#: and a quarter of that in draws; ``smc`` 8 chains of 256 particles, the warm-up the
#: length of the tempering measured on seed 1 (three chains) plus about a seventh (so
#: that every chain reaches beta = 1), one sweep of draws; ``tempering`` 8 chains of 8 rungs, 300 warm-up
#: transitions and 600 draws (1000 and 2000 in 10-d). ``smc-wf`` is ``smc`` with
#: waste-free stages: 8 chains of 1024 particles in chains of 32 (``waste_free`` 32: 32
#: ancestors a stage), the warm-up by ``smc``'s rule, one sweep of draws (the whole
#: population, for the modes' shares).
BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    "importance": {
        name: {"chains": 16, "warmup": w, "iterations": w // 4, "options": {}}
        for name, w in {
            "gauss10": 4000,
            "mixture4": 2000,
            "eggbox": 2000,
            "shells": 2000,
            "logistic": 2000,
        }.items()
    },
    "smc": {
        name: {"chains": 8, "warmup": w, "iterations": 256, "options": {"particles": 256}}
        for name, w in {
            "gauss10": 72000,
            "mixture4": 20000,
            "eggbox": 45000,
            "shells": 10000,
            "logistic": 18000,
        }.items()
    },
    "smc-wf": {
        name: {
            "chains": 8,
            "warmup": w,
            "iterations": 1024,
            "options": {"particles": 1024, "waste_free": 32},
        }
        for name, w in {
            "gauss10": 16000,
            "mixture4": 9000,
            "eggbox": 9000,
            "shells": 7000,
            "logistic": 9000,
        }.items()
    },
    "tempering": {
        name: {"chains": 8, "warmup": w, "iterations": 2 * w, "options": {}}
        for name, w in {
            "gauss10": 1000,
            "mixture4": 300,
            "eggbox": 300,
            "shells": 300,
            "logistic": 300,
        }.items()
    },
}


class Counted:
    """A likelihood with its evaluations counted (the prior's support checked first)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.evaluations = 0
        self.outside = 0

    def likelihood(self, x: np.ndarray) -> float:
        self.evaluations += 1
        return self.target.log_likelihood(np.asarray(x, dtype=float))

    def parts(self, x: np.ndarray) -> tuple[float, float]:
        lp = self.target.log_prior(np.asarray(x, dtype=float))
        if lp == -math.inf:
            self.outside += 1
            return lp, 0.0
        return lp, self.likelihood(x)

    def density(self, x: np.ndarray) -> float:
        lp, ll = self.parts(x)
        return lp + ll


def _modes(target: Target, draws: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    return target.modes(draws, weights) if target.modes is not None else {}


def run_kameleon(name: str, target: Target, seed: int) -> dict[str, Any]:
    budget = BUDGETS[name][target.name]
    algorithm = "smc" if name == "smc-wf" else name
    options = dict(budget["options"])
    counted = Counted(target)
    fn: Callable[[np.ndarray], Any] = counted.density
    if algorithm in ("smc", "tempering"):
        options["tempered"] = "likelihood"
        fn = counted.parts
    if algorithm == "smc":
        mean, sd = target.reference()
        options.setdefault("reference_mean", mean)
        options.setdefault("reference_sd", sd)
    chains = budget["chains"]
    starts = target.prior_draws(np.random.default_rng(seed), chains)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = kameleon.sample(
            fn, target.dim, initial=starts, algorithm=algorithm, chains=chains,
            warmup=budget["warmup"], iterations=budget["iterations"], seed=seed,
            progress=False, **options,
        )  # fmt: skip
    seconds = time.perf_counter() - started
    ev = result.evidence
    assert ev is not None
    draws = result.draws.reshape(-1, target.dim)
    weights = result.weights.reshape(-1) if algorithm == "importance" else np.ones(len(draws))
    return {
        "log_z": ev.log_evidence,
        "se": ev.standard_error,
        "evaluations": counted.evaluations,
        "outside": counted.outside,
        "warnings": sorted({w.code for w in result.warnings}),
        "seconds": seconds,
        **_modes(target, draws, weights),
    }


def run_dynesty(target: Target, seed: int) -> dict[str, Any] | None:
    try:
        import dynesty  # type: ignore[import-not-found]
    except ImportError:
        print("dynesty is not installed: pip install dynesty==3.1.0", file=sys.stderr)
        return None
    counted = Counted(target)
    started = time.perf_counter()
    sampler = dynesty.NestedSampler(
        counted.likelihood, target.prior_transform, target.dim, nlive=1000,
        rstate=np.random.default_rng(seed),
    )  # fmt: skip
    sampler.run_nested(dlogz=0.1, print_progress=False)
    res = sampler.results
    weights = np.exp(res.logwt - res.logz[-1])
    return {
        "log_z": float(res.logz[-1]),
        "se": float(res.logzerr[-1]),
        "evaluations": counted.evaluations,
        "seconds": time.perf_counter() - started,
        "version": dynesty.__version__,
        **_modes(target, np.asarray(res.samples), weights),
    }


def run_pocomc(target: Target, seed: int) -> dict[str, Any] | None:
    try:
        import pocomc  # type: ignore[import-not-found]
    except ImportError:
        print("pocomc is not installed: pip install pocomc==1.2.6", file=sys.stderr)
        return None
    import torch  # type: ignore[import-not-found]

    torch.manual_seed(seed)
    counted = Counted(target)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = pocomc.Sampler(
            pocomc.Prior(target.scipy_prior()), counted.likelihood, random_state=seed,
            output_dir=None,
        )  # fmt: skip
        sampler.run(progress=False)
    log_z, log_z_err = sampler.evidence()
    samples, weights, _, _ = sampler.posterior()
    return {
        "log_z": float(log_z),
        "se": float(log_z_err),
        "evaluations": counted.evaluations,
        "seconds": time.perf_counter() - started,
        "version": pocomc.__version__,
        **_modes(target, np.asarray(samples), np.asarray(weights)),
    }


def run(sampler: str, target: Target, seed: int) -> dict[str, Any] | None:
    if sampler == "dynesty":
        return run_dynesty(target, seed)
    if sampler == "pocomc":
        return run_pocomc(target, seed)
    return run_kameleon(sampler, target, seed)


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| target | sampler | log Z error | error / reported se | evaluations | calls outside "
        "| mode share | modes found | warnings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(values: list[float], fmt: str) -> str:
        if not values:
            return ""
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} to {max(values):{fmt}})"

    names = list(dict.fromkeys(r["target"] for r in results))
    for name in names:
        for sampler in SAMPLER_NAMES:
            rows = [
                (r[sampler], r["truth"]) for r in results if r["target"] == name and r.get(sampler)
            ]
            if not rows:
                continue
            errors = [r["log_z"] - truth for r, truth in rows]
            z = [
                e / r["se"] if r["se"] else math.inf for e, (r, _) in zip(errors, rows, strict=True)
            ]
            share = cell([r["share"] for r, _ in rows if "share" in r], ".3f")
            found = cell([r["found"] for r, _ in rows if "found" in r], ".0f")
            warned = ""
            if sampler in BUDGETS:
                codes = [",".join(r["warnings"]) or "none" for r, _ in rows]
                warned = codes[0] + " (every seed)" if len(set(codes)) == 1 else "; ".join(codes)
            evaluations = statistics.median(r["evaluations"] for r, _ in rows)
            outside = [r["outside"] for r, _ in rows if "outside" in r]
            calls = f"{statistics.median(outside):.0f}" if outside else ""
            lines.append(
                f"| {name} | {sampler} | {cell(errors, '+.3f')} | {cell(z, '+.1f')} | "
                f"{evaluations:.0f} | {calls} | {share} | {found} | {warned} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--samplers", default=",".join(SAMPLER_NAMES))
    parser.add_argument("--out", default="bench/results/evidence.json")
    parser.add_argument("--table", default=None, help="print the table of a results file")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())["results"]))
        return
    versions = {"kameleon": kameleon.__version__}
    samplers = args.samplers.split(",")
    results = []
    for name in args.targets.split(","):
        target = TARGETS[name]()
        for seed in map(int, args.seeds.split(",")):
            row: dict[str, Any] = {
                "target": name, "seed": seed, "truth": target.log_z, "truth_se": target.log_z_se
            }  # fmt: skip
            for sampler in samplers:
                row[sampler] = run(sampler, target, seed)
                if row[sampler] and "version" in row[sampler]:
                    versions[sampler] = row[sampler]["version"]
            print(json.dumps(row), flush=True)
            results.append(row)
            doc = {
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "versions": versions,
                "budgets": {s: BUDGETS[s] for s in samplers if s in BUDGETS},
                "results": results,
            }
            # written after every row: a run cut short keeps what it measured
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
