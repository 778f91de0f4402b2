"""The validation suite at a reduced size (core.validation.suite; the full size is
``bench/validation.py``, with its table in BENCHMARKS.md).

The promise checked for every sampler on every case: it is right, or it says that it
may not be. On the hard cases (Neal's funnel, the centred eight schools, a
well-separated mixture) it must warn whatever it drew: a confident clean exit there is
the failure. On the cases with known answers it must be right (every mean within 4 MCSE
and every sd within 10 % of the truth, or the quantiles within 4 standard errors) or
warn. Gradient samplers (``mala``, ``hmc``, ``nuts``) are given the case's exact gradient with its log
density (``Case.gradient``). The budget is small on purpose (4 chains x 1000 + 1000
iterations): short runs are where a sampler is most often wrong, so this is where its
warnings must work. The seed is fixed and was not chosen to pass. ``importance`` is
judged by its weighted estimates, and on the separated mixture (whose answer is known)
it may be right instead of warning, as ``tempering`` and ``smc`` may.

``nuts`` runs here with its trees cut at depth 5 (31 leapfrog steps): on the rotated
Gaussian with condition number 1e12, its diagonal metric cannot straighten the target
and every tree reaches the default's depth 10, 1023 gradients per draw, which costs six
minutes here. At the default depth it passes every case too (measured with
this seed), and at depth 6 (63 steps) each case, with this seed, took the branch it
takes at depth 5: silent and right on the correlated 6-d Gaussian and the Student-t,
warning on every other case (at depth 6 it was right on the Gaussian with correlation
0.999 and warned; at depth 5 it warns there and is not right). Depth 5 also passes
with seeds 4 and 5. ``bench/validation.py`` runs the defaults.
"""

from __future__ import annotations

import pytest

from kameleon.core import SAMPLERS
from kameleon.core.validation.cases import cases
from kameleon.core.validation.suite import run_case

CASES = {case.name: case for case in cases()}


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(CASES))
# Not sgld: its targets are posteriors of data told in minibatches, and it is biased by
# design (no accept/reject), so "right" on these targets is not its claim.
@pytest.mark.parametrize("algorithm", sorted(set(SAMPLERS) - {"sgld"}))
def test_right_or_says_so(algorithm: str, target: str) -> None:
    case = CASES[target]
    options = {"max_tree_depth": 5} if algorithm == "nuts" else None
    result = run_case(
        case, algorithm, chains=4, warmup=1000, iterations=1000, seed=3, options=options
    )
    if case.hard and (SAMPLERS[algorithm].weighted or algorithm in ("tempering", "smc")):
        # Importance samples weighted against every chain's proposal may be right where
        # no chain can (the separated mixture, whose answer is known), and so may chains
        # whose hot rungs cross between its modes, and populations that carry both modes
        # with their weights: right, or warn.
        assert result.says_so or (case.mean is not None and result.matches), result
    elif case.hard:
        assert result.says_so, result
    else:
        assert result.right or result.says_so, result
