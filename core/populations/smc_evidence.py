"""The log evidence of sequential Monte Carlo (``smc``) from its chains, and its
warnings: how the session's estimate and its error are made from each chain's
estimate (the sum of its stages' ``log sum W w``), and when they are not to be trusted.

Each chain's ``Z`` is an unbiased estimate for fixed temperatures, so the chains
combine as the mean of their ``Z``: the mean of their ``log Z`` would be biased low by
half a chain's variance of ``log Z``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kameleon.core.diagnostics.findings import Finding
from kameleon.core.interface.chain import FloatArray
from kameleon.core.numerics import arithmetic
from kameleon.core.populations.annealing import below, log_mean_exp
from kameleon.core.populations.evidence import Evidence
from kameleon.core.populations.stepping_stones import MIN_CHAINS_FOR_ERROR, few_chains

__all__ = [
    "CHAINS_SHARE",
    "COLLAPSE",
    "chain_evidence",
    "chains_ess",
    "evidence_findings",
    "evidence_of",
    "log_evidence",
]

#: A chain whose weights' effective sample size fell below this share of the one its
#: stages keep (``ess_fraction`` of the particles) warns ``evidence_unreliable``; the
#: stages' bisection keeps it (to its precision) unless the step is forced.
COLLAPSE = 0.5

#: The chains' estimates of ``Z`` disagree when fewer than this share of the chains
#: carries their mean (:func:`chains_ess`): ``evidence_unreliable``. A chain's
#: ``log Z`` whose standard deviation is ``sigma`` gives about ``exp(-sigma^2)`` of the
#: chains, a half at ``sigma`` 0.83.
CHAINS_SHARE = 0.5


def log_evidence(state: Any) -> float:
    """The chain's estimate of ``log Z``; NaN until its tempering has reached 1."""
    if state.logdensity is None or state.beta < 1.0:
        return math.nan
    return float(state.log_evidence)


def chain_evidence(states: Sequence[Any], params: Any) -> Evidence | None:
    """The log evidence of the chains that reached ``beta = 1``: the log of the mean of
    their estimates of ``Z`` (each unbiased for fixed temperatures, so their mean is too,
    and its log is biased low by about ``1 / chains`` of a chain's variance of ``log Z``,
    where the mean of the chains' ``log Z`` is biased low by half of it); its standard
    error by the delta method, the standard deviation of ``Z_c / mean(Z)`` over
    ``sqrt(chains)`` (NaN with one chain); ``ess`` the smallest conditional effective
    sample size of a stage, summed over the chains; ``pareto_k`` NaN; ``draws`` every
    chain's post-warm-up draws. ``None`` before any chain's tempering reached 1.

    The error comes from the spread of independent runs, so it needs no model of the
    correlation within a population: waste-free stages (``waste_free``), whose
    particles are a few ancestors' chains, need none of the single-run estimates (Dau
    and Chopin's, which treat the chains as blocks), and the chains' spread counts the
    correlation as it is; it is itself uncertain with few chains (8 chains' spread of
    ``log Z`` estimates its standard deviation to about a quarter)."""
    done = [s for s in states if not math.isnan(log_evidence(s))]
    if not done:
        return None
    values = np.array([s.log_evidence for s in done])
    draws = sum(max(0, s.iteration - params.warmup) for s in done)
    mean = log_mean_exp(values)
    ratios = _evidence_ratios(values)
    se = (
        float(np.std(ratios, ddof=1) / math.sqrt(values.size))
        if values.size > 1 and ratios is not None
        else math.nan
    )
    ess = float(sum(s.min_ess for s in done))
    return Evidence(mean, se, ess, math.nan, draws)


def _evidence_ratios(log_z: FloatArray) -> FloatArray | None:
    """``Z_c / mean(Z)`` of the chains' estimates (``None`` when every one is zero or
    one is infinite)."""
    top = float(np.max(log_z))
    if not math.isfinite(top):
        return None
    z = arithmetic.exp(below(np.asarray(log_z, dtype=np.float64), top))
    out: FloatArray = z / float(np.mean(z))
    return out


def chains_ess(log_z: FloatArray) -> float:
    """Kish's effective number of chains behind the mean of their estimates of ``Z``,
    ``(sum Z_c)^2 / sum Z_c^2``: the chains' count when they agree, near 1 when one
    chain's estimate dwarfs the others'."""
    ratios = _evidence_ratios(log_z)
    if ratios is None:
        return math.nan
    return float(np.sum(ratios)) ** 2 / float(np.sum(ratios * ratios))


def evidence_findings(states: Sequence[Any], params: Any) -> list[Finding]:
    """The warnings: ``smc_unfinished`` (a chain's warm-up ended before its tempering
    reached ``beta = 1``, which was then forced: its draws and its evidence are
    unreliable) and ``evidence_unreliable`` (fewer than 4 chains reached 1; a chain's
    weights fell below :data:`COLLAPSE` of the effective sample size its stages keep,
    ``ess_fraction N``: in the likelihood mode, starting weights ``prior / reference``
    dominated by a few particles, a reference that does not cover the prior well; or
    fewer than :data:`CHAINS_SHARE` of the chains carry the mean of their ``Z``)."""
    found: list[Finding] = []
    told = [s for s in states if s.logdensity is not None and s.iteration >= params.particles]
    unfinished = [s for s in told if s.unfinished]
    if unfinished:
        reached = min(float(s.forced_from) for s in unfinished)
        found.append(
            Finding(
                "smc_unfinished",
                None,
                unfinished[0].chain if len(unfinished) == 1 else None,
                float(len(unfinished)),
                0.0,
                f"{len(unfinished)} of {len(told)} chains had not reached beta = 1 when "
                f"warm-up ended (beta {reached:.3g} at worst"
                + (", still on the bridge from the reference to the prior" if reached == 0 else "")
                + "): the last step to 1 was forced, so their first draws after warm-up "
                "and the evidence are unreliable",
            )
        )
    ev = chain_evidence(states, params)
    done = [s for s in states if not math.isnan(log_evidence(s))]
    planned = params.ess_fraction * params.particles
    reference = (
        " (in the likelihood mode: the starting weights prior / reference, a reference "
        "that covers the prior poorly, which the bridge to the prior crosses with heavy "
        "weights; a reference at least as wide as the prior: reference_mean and "
        "reference_sd)"
        if params.tempered == "likelihood"
        else ""
    )
    found += _worst_chain(
        done,
        "min_ess",
        COLLAPSE * planned,
        lambda n, worst: (
            f"{n} of {len(done)} chains' weights fell to an effective sample "
            f"size of {worst:.0f} particles at worst, under {COLLAPSE * planned:.0f} (the "
            f"stages keep {planned:.0f}): the evidence rests on a few particles, and its "
            "error bar does not show it" + reference
        ),
    )
    found += _worst_chain(
        done,
        "mixed",
        params.mixing,
        lambda n, worst: (
            (
                f"{n} of {len(done)} chains had a waste-free stage whose chains of "
                f"{params.waste_free} states ended before they mixed: {worst:.2f} accepted "
                f"moves per chain and dimension at worst, under {params.mixing:g} (mixing); "
                "the next stage weighed near copies of a few ancestors, and the evidence is "
                "biased whatever its error bar (a larger waste_free)"
            )
            if params.waste_free
            else (
                f"{n} of {len(done)} chains had a stage whose moves ended "
                f"(max_moves {params.max_moves}) before the particles mixed: {worst:.2f} "
                f"accepted moves per particle and dimension at worst, under {params.mixing:g} "
                "(mixing); the next stage weighed too few distinct points, and the evidence "
                "is biased whatever its error bar (a larger max_moves)"
            )
        ),
    )
    if ev is not None and len(done) < MIN_CHAINS_FOR_ERROR:
        found.append(few_chains(len(done)))
    elif ev is not None:
        log_z = np.array([s.log_evidence for s in done])
        carried = chains_ess(log_z)
        if carried < CHAINS_SHARE * len(done):
            spread = (
                float(np.std(log_z[np.isfinite(log_z)], ddof=1))
                if np.sum(np.isfinite(log_z)) > 1
                else math.inf
            )
            found.append(
                Finding(
                    "evidence_unreliable",
                    None,
                    None,
                    carried,
                    CHAINS_SHARE * len(done),
                    f"the chains' estimates of log Z spread by a standard deviation of "
                    f"{spread:.2f}, so that {carried:.1f} of {len(done)} chains carry their "
                    "mean: the evidence and its error bar rest on a few chains (more "
                    "particles, more moves or a larger ess_fraction narrow the spread)",
                )
            )
    return found


def _worst_chain(
    done: Sequence[Any], field: str, threshold: float, message: Callable[[int, float], str]
) -> list[Finding]:
    """``evidence_unreliable`` for the finished chains (not forced to ``beta = 1``, which
    ``smc_unfinished`` names) whose ``field`` fell under ``threshold``: the value the
    worst one's, the chain named when it is alone."""
    under = [s for s in done if getattr(s, field) < threshold and not s.unfinished]
    if not under:
        return []
    worst = min(float(getattr(s, field)) for s in under)
    chain = under[0].chain if len(under) == 1 else None
    return [
        Finding("evidence_unreliable", None, chain, worst, threshold, message(len(under), worst))
    ]


def evidence_of(states: Sequence[Any], params: Any) -> tuple[Evidence | None, list[Finding]]:
    """:func:`chain_evidence` and :func:`evidence_findings` together (the record's
    ``chain_evidence``)."""
    return chain_evidence(states, params), evidence_findings(states, params)
