"""The validation suite at full size: every sampler on every case of
:mod:`core.validation.suite`, in process.

Usage::

    python bench/validation.py [--chains 4] [--warmup 5000] [--iterations 5000] \
        [--algorithms am,kameleon] [--target NAME ...] [--out bench/results/validation.json]

Gradient samplers (``mala``) get each case's exact gradient (``Case.gradient``); the
``evaluations`` of a row count transitions, for every sampler (see ``run_case``).
Prints one JSON line per (case, sampler) and writes them all to ``--out``. BENCHMARKS.md
("Validation") has the table of the last full run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kameleon.core import SAMPLERS
from kameleon.core.validation.cases import cases
from kameleon.core.validation.suite import run_case


def table(rows: list[dict[str, object]]) -> str:
    """The markdown table of BENCHMARKS.md ("Validation") for the rows of a run."""
    algorithms: list[str] = []
    targets: list[str] = []
    for row in rows:
        for value, seen in ((row["algorithm"], algorithms), (row["target"], targets)):
            if value not in seen:
                seen.append(str(value))
    by = {(r["target"], r["algorithm"]): r for r in rows}
    lines = ["| case | " + " | ".join(algorithms) + " |", "|---" * (len(algorithms) + 1) + "|"]
    for target in targets:
        cells = []
        for algorithm in algorithms:
            r: dict[str, Any] = by[(target, algorithm)]
            if r["hard"]:
                cells.append(
                    ("warns" if r["says_so"] else "**silent**") + f", R-hat {r['max_rhat']:.2f}"
                )
                continue
            if r["right"]:
                verdict = "right, warns" if r["says_so"] else "right"
            else:
                verdict = "wrong, warns" if r["says_so"] else "**wrong, silent**"
            parts = [verdict]
            if r["sd_ratio"] is not None:
                parts.append(f"sd {r['sd_ratio'][0]:.2f}-{r['sd_ratio'][1]:.2f}")
            if r["max_quantile_error_se"] is not None:
                parts.append(f"quartiles {r['max_quantile_error_se']:.1f} se")
            if r.get("coverage_error") is not None:
                parts.append(f"cov. err {r['coverage_error']:.3f}")
            parts.append(f"ESS/1k {r['min_ess_per_1000']:.2f}")
            cells.append(", ".join(parts))
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The validation suite at full size.")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=5000, help="post-warm-up, per chain")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--algorithms", default=",".join(SAMPLERS))
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        help="a case name; repeat for several (default all)",
    )
    parser.add_argument("--out", default="bench/results/validation.json")
    parser.add_argument(
        "--table", metavar="RESULTS", help="print the markdown table of a results file and exit"
    )
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    wanted = set(args.target)
    rows = []
    for case in cases():
        if wanted and case.name not in wanted:
            continue
        for algorithm in args.algorithms.split(","):
            result = run_case(
                case,
                algorithm,
                chains=args.chains,
                warmup=args.warmup,
                iterations=args.iterations,
                seed=args.seed,
            )
            rows.append(result.as_dict())
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
