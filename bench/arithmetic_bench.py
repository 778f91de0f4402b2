"""What the machine-independent arithmetic (core/numerics/arithmetic.py) costs: each sampler's
time per iteration, and the kernel samplers' fits, in this tree and in an earlier
revision, side by side in one run.

    .venv/bin/python bench/arithmetic_bench.py [--before REV] [--repeats 3]

``--before`` (default: the revision before core/numerics/arithmetic.py was added) is exported
with ``git archive`` into a temporary directory. Each measurement runs in its
own subprocess with one BLAS thread, the two trees alternating, ``--repeats`` times;
the table gives the medians of the processes' CPU times (``time.process_time``: on a
shared machine, wall-clock times measure the neighbours). Per iteration: ``ask`` + ``tell`` + the density of an
8-dimensional banana, default options, over the kernel method's warm-up (after
scouting: fits, adaptation) and after warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import kameleon.core
assert kameleon.core.__file__.startswith(sys.argv[1]), kameleon.core.__file__
from kameleon.core import SAMPLERS
try:
    from kameleon.core.validation.targets import Banana
except ImportError:  # a revision from before core/ was grouped into subpackages
    from kameleon.core.targets import Banana

what, dim, warmup, after = sys.argv[2], 8, 1000, 500
target = Banana(dim=dim, b=0.03, v=100.0)
out = {}
if what == "fits":
    try:
        from kameleon.core.kernels import score_matching as sm
        from kameleon.core.numerics.linalg import jittered_cholesky
    except ImportError:  # before the subpackages
        from kameleon.core import score_matching as sm
        from kameleon.core.linalg import jittered_cholesky
    rng = np.random.default_rng(0)
    z = rng.standard_normal((250, dim))
    omega, phase = sm.random_features(rng, dim, 200, 1.5)
    factor, b = sm.finite_initial(omega, 100.0)
    S = rng.standard_normal((250, 250))
    S = S @ S.T + 250 * np.eye(250)
    for name, call in [
        ("fit_lite n=250", lambda: sm.fit_lite(z, 1.5, 0.03)),
        ("finite_update k=20 m=200", lambda: sm.finite_update(factor, b, z[:20], omega, phase)),
        ("cholesky 250", lambda: jittered_cholesky(S)),
    ]:
        call()
        times = []
        for _ in range(5):
            t = time.process_time(); call(); times.append(time.process_time() - t)
        out[name] = min(times) * 1e3  # ms
else:
    sampler = SAMPLERS[what]
    params = sampler.make_params(dim, {}, warmup=warmup)
    state = sampler.init(np.full(dim, 0.1), params, seed=3, chain=0)
    marks = {}
    start = time.process_time()
    while state.iteration < warmup + after:
        if state.iteration in (warmup // 2, warmup) and state.iteration not in marks:
            marks[state.iteration] = time.process_time()
        proposal = sampler.ask(state, params)
        state, _ = sampler.tell(state, params, proposal, target.logdensity(proposal.position))
    end = time.process_time()
    out["warm-up (kernel part)"] = (marks[warmup] - marks[warmup // 2]) / (warmup // 2) * 1e6
    out["after warm-up"] = (end - marks[warmup]) / after * 1e6  # us
print(json.dumps(out))
"""


def export(revision: str, into: Path) -> Path:
    archive = into / "tree.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", revision], cwd=ROOT, stdout=f, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="tar")
    return tree


def measure(tree: Path, what: str) -> dict[str, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), what],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    if args.before is None:
        added = subprocess.run(
            [
                "git",
                "log",
                "--follow",
                "--diff-filter=A",
                "--format=%h",
                "--",
                "core/numerics/arithmetic.py",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        args.before = f"{added[-1]}~1"
    whats = args.only or ["rwm", "am", "kameleon", "kmc-lite", "kmc-finite", "fits"]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp)), "after": ROOT}
        rows: dict[tuple[str, str], dict[str, list[float]]] = {}
        for what in whats:
            for _ in range(args.repeats):
                for label, tree in trees.items():
                    for key, value in measure(tree, what).items():
                        rows.setdefault((what, key), {}).setdefault(label, []).append(value)
    print(f"before: {args.before}; medians of {args.repeats} runs, one BLAS thread\n")
    print("| what | before | after | after / before |")
    print("| --- | ---: | ---: | ---: |")
    for (what, key), values in rows.items():
        before, after = statistics.median(values["before"]), statistics.median(values["after"])
        unit = "ms" if what == "fits" else "us/iteration"
        label = key if what == "fits" else f"{what}, {key}"
        print(f"| {label} | {before:.0f} {unit} | {after:.0f} {unit} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
