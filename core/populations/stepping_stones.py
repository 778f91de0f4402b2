"""The log evidence of parallel tempering by stepping stones (Xie et al. 2011), and the
warnings of its ladder: what ``tempering``'s chains keep for it and how the session's
estimate and its error are made from them.

Each chain keeps, per rung, running log-sum-exps of the stones' weights
``exp((beta_k - beta_{k+1}) l)`` over its post-warm-up states (and of their squares, for
their effective sample sizes) and the swaps accepted per pair of neighbours (fields
``stone_lse``, ``stone_lse2``, ``swaps`` and ``betas`` of ``tempering.State``). A chain's
estimate is a sum of logs of means; the session's is the chains' mean, its standard
error their spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kameleon.core.diagnostics.findings import Finding
from kameleon.core.interface.chain import FloatArray
from kameleon.core.populations.evidence import Evidence

__all__ = [
    "MIN_CHAINS_FOR_ERROR",
    "MIN_STONE_ESS",
    "MIN_SWAP_RATE",
    "chain_evidence",
    "evidence_findings",
    "evidence_of",
    "few_chains",
    "log_evidence",
]

#: A pair of neighbouring rungs whose post-warm-up swap rate (averaged over the chains)
#: is below this warns (``swap_rate_low``).
MIN_SWAP_RATE = 0.02
#: Fewer chains than this: the spread of their evidence estimates is a poor standard
#: error (``evidence_unreliable``).
MIN_CHAINS_FOR_ERROR = 4
#: A stepping stone whose weights' effective sample size (over every chain) is below
#: this warns (``evidence_unreliable``).
MIN_STONE_ESS = 100.0


def few_chains(chains: int) -> Finding:
    """``evidence_unreliable`` for an evidence whose standard error is the spread of
    ``chains`` chains' estimates, fewer than :data:`MIN_CHAINS_FOR_ERROR` (``tempering``,
    ``smc``)."""
    return Finding(
        "evidence_unreliable",
        None,
        None,
        float(chains),
        float(MIN_CHAINS_FOR_ERROR),
        f"the evidence's standard error is the spread of {chains} chains' estimates, under "
        f"{MIN_CHAINS_FOR_ERROR}: it is " + ("missing" if chains == 1 else "a rough guess"),
    )


def log_evidence(state: Any, params: Any) -> tuple[float, int]:
    """The chain's stepping-stone estimate of ``log Z`` and its post-warm-up draws (NaN
    with none)."""
    n = state.iteration - params.warmup if state.logdensity is not None else 0
    if n <= 0:
        return math.nan, 0
    lse = np.asarray(state.stone_lse)
    log_n = math.log(n)
    return float(np.sum(lse[:-1] - log_n) - (lse[-1] - log_n)), n


def _stone_ess(state: Any) -> FloatArray:
    lse, lse2 = np.asarray(state.stone_lse), np.asarray(state.stone_lse2)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(np.exp(2.0 * lse - lse2))


def chain_evidence(states: Sequence[Any], params: Any) -> Evidence | None:
    """The log evidence of the chains: the mean of their stepping-stone estimates, its
    standard error their standard deviation over ``sqrt(chains)`` (NaN with one chain);
    ``ess`` the smallest stone's weights' effective sample size summed over the chains,
    ``pareto_k`` NaN (there are no importance weights to judge), ``draws`` every chain's
    post-warm-up draws. ``None`` before any chain has a post-warm-up draw."""
    estimates = [log_evidence(s, params) for s in states]
    kept = [(z, n) for z, n in estimates if n > 0]
    if not kept:
        return None
    values = np.array([z for z, _ in kept])
    draws = sum(n for _, n in kept)
    mean = float(np.mean(values))
    se = float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan
    ess = np.sum([_stone_ess(s) for s, (_, n) in zip(states, estimates, strict=True) if n], axis=0)
    return Evidence(mean, se, float(np.min(ess)), math.nan, draws)


def evidence_findings(states: Sequence[Any], params: Any) -> list[Finding]:
    """The warnings of the chains' ladders and evidence: ``swap_rate_low`` (a pair of
    neighbours whose post-warm-up swap rate, over the chains, is below
    :data:`MIN_SWAP_RATE`: the ladder is too sparse there and modes may be missed) and
    ``evidence_unreliable`` (fewer than :data:`MIN_CHAINS_FOR_ERROR` chains, or a stone
    whose weights' effective sample size is below :data:`MIN_STONE_ESS`)."""
    found: list[Finding] = []
    post = [(s, s.iteration - params.warmup) for s in states if s.logdensity is not None]
    post = [(s, n) for s, n in post if n > 0]
    if not post:
        return found
    total = sum(n for _, n in post)
    rates = np.sum([np.asarray(s.swaps) for s, _ in post], axis=0) / total
    worst = int(np.argmin(rates))
    if rates[worst] < MIN_SWAP_RATE:
        betas = np.asarray(post[0][0].betas)
        found.append(
            Finding(
                "swap_rate_low",
                None,
                None,
                float(rates[worst]),
                MIN_SWAP_RATE,
                f"the rungs at beta {betas[worst]:.3g} and {betas[worst + 1]:.3g} swapped with "
                f"probability {rates[worst]:.3f} after warm-up: the ladder is too sparse "
                "there, so the cold chain may miss modes that the hot ones found",
            )
        )
    ev = chain_evidence(states, params)
    if ev is not None:
        if len(post) < MIN_CHAINS_FOR_ERROR:
            found.append(few_chains(len(post)))
        elif ev.ess < MIN_STONE_ESS:
            found.append(
                Finding(
                    "evidence_unreliable",
                    None,
                    None,
                    ev.ess,
                    MIN_STONE_ESS,
                    f"a stepping stone's weights have an effective sample size of "
                    f"{ev.ess:.0f}, under {MIN_STONE_ESS:.0f}: the evidence and its error "
                    "are unreliable (more rungs, or a longer run)",
                )
            )
    return found


def evidence_of(states: Sequence[Any], params: Any) -> tuple[Evidence | None, list[Finding]]:
    """:func:`chain_evidence` and :func:`evidence_findings` together (the record's
    ``chain_evidence``)."""
    return chain_evidence(states, params), evidence_findings(states, params)
