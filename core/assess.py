"""What a run's post-warm-up draws say, for every runner (in process, the SDK, the
service): per-parameter diagnostics, the warnings, and for importance samples the
evidence (:mod:`core.evidence`).

Markov chains are judged by :func:`core.diagnostics.summarize` and
:func:`core.checks.check`; a sampler whose chains estimate the evidence in their states
(its record's ``chain_evidence``: ``tempering``) adds that evidence and its warnings.
Weighted draws (a sampler whose record says ``weighted``) are not chains: they are
weighed against the mixture of every chain's proposal (the sampler's
``mixture_log_weights``), and judged by their weights: the Pareto k of their tail and
their effective sample size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.base import FloatArray, Sampler
from kameleon.core.checks import Finding, check
from kameleon.core.diagnostics import ParameterSummary, summarize
from kameleon.core.evidence import K_BAD, Evidence, evidence, summaries

__all__ = [
    "MAX_UNSEEN",
    "MIN_IMPORTANCE_ESS",
    "Assessment",
    "assess",
    "importance_findings",
    "mode_findings",
]

#: An effective sample size of the weights below this warns (``importance_ess``).
MIN_IMPORTANCE_ESS = 100.0


@dataclass(frozen=True, slots=True)
class Assessment:
    """Diagnostics per parameter, the warnings, and the evidence of weighted draws with
    the log weights it was computed from, shape ``(chains, draws)``, or the evidence of
    a sampler whose chains estimate it (``log_weights`` ``None``); ``None`` for other
    Markov chains."""

    summaries: list[ParameterSummary]
    findings: list[Finding]
    evidence: Evidence | None = None
    log_weights: FloatArray | None = None


def importance_findings(ev: Evidence) -> list[Finding]:
    """The warnings of importance weights: a Pareto k above :data:`core.evidence.K_BAD`
    (or none where the weights are all zero), an effective sample size below
    :data:`MIN_IMPORTANCE_ESS`."""
    found = []
    if math.isnan(ev.pareto_k) and ev.draws and ev.log_evidence == -math.inf:
        found.append(
            Finding(
                "importance_ess",
                None,
                None,
                0.0,
                MIN_IMPORTANCE_ESS,
                "every importance weight is zero: no draw landed where the density is positive",
            )
        )
        return found
    if ev.pareto_k > K_BAD:
        found.append(
            Finding(
                "pareto_k",
                None,
                None,
                ev.pareto_k,
                K_BAD,
                f"the importance weights' Pareto k is {ev.pareto_k:.2f}, above {K_BAD}: the "
                "weighted estimates and the evidence are unreliable, whatever their "
                "standard errors say",
            )
        )
    if ev.ess < MIN_IMPORTANCE_ESS:
        found.append(
            Finding(
                "importance_ess",
                None,
                None,
                ev.ess,
                MIN_IMPORTANCE_ESS,
                f"the importance weights' effective sample size is {ev.ess:.0f}, under "
                f"{MIN_IMPORTANCE_ESS:.0f}",
            )
        )
    return found


def assess(
    sampler: Sampler[Any, Any],
    params: Any,
    draws: FloatArray,
    names: Sequence[str],
    *,
    acceptance: Sequence[float | None] | None,
    log_density: FloatArray,
    stats: dict[str, FloatArray],
    states: Sequence[Any] | None = None,
) -> Assessment:
    """The assessment of post-warm-up ``draws`` (``(chains, draws, dim)``, the chains cut
    to a common length), with the log density at each (``(chains, draws)``), the
    sampler's recorded statistics by name, each chain's acceptance rate, and, for a
    weighted sampler, the chains' final states (their proposals)."""
    x = np.asarray(draws, dtype=np.float64)
    if not sampler.weighted:
        found_summaries = summarize(x, names)
        findings = check(
            x,
            names,
            acceptance if sampler.acceptance_checked else None,
            summaries=found_summaries,
            log_density=log_density,
            divergent=stats.get("diverging"),
            energy=stats.get("energy"),
        )
        if sampler.chain_evidence is None or states is None:
            return Assessment(list(found_summaries), findings)
        # A sampler whose chains estimate the evidence in their states (tempering).
        chain_ev, chain_findings = sampler.chain_evidence(states, params)
        return Assessment(list(found_summaries), findings + chain_findings, chain_ev)
    assert sampler.mixture_log_weights is not None and states is not None
    chains, n, d = x.shape
    if n:
        flat = sampler.mixture_log_weights(
            states, params, x.reshape(-1, d), np.asarray(log_density).reshape(-1)
        )
        log_w = np.asarray(flat).reshape(chains, n)
    else:
        log_w = np.zeros((chains, 0))
    ev = evidence(log_w)
    found: list[Finding] = []
    if n == 0:
        found.append(Finding("too_few_draws", None, None, 0.0, 1.0, "no post-warm-up draws yet"))
        return Assessment([], found, ev, log_w)
    found = importance_findings(ev)
    if sampler.modes is not None:
        found += mode_findings(sampler.modes(states), chains)
    return Assessment(summaries(names, x, log_w), found, ev, log_w)


#: A share of modes found by one chain only above this warns (``unseen_modes``).
MAX_UNSEEN = 0.05


def mode_findings(groups: Sequence[Sequence[int]], chains: int) -> list[Finding]:
    """The ``unseen_modes`` warning: weighted draws cover only the modes some chain
    found, and a mode that one chain alone found says that others may have been found by
    none. Good and Turing's estimate of the mass of the modes not seen, the share of
    chains that found a mode alone, above :data:`MAX_UNSEEN` warns."""
    alone = sum(len(g) == 1 for g in groups)
    if len(groups) < 2 or alone / chains <= MAX_UNSEEN:
        return []
    return [
        Finding(
            "unseen_modes",
            None,
            None,
            alone / chains,
            MAX_UNSEEN,
            f"the chains found {len(groups)} separate modes, {alone} of them by one chain "
            "only: modes that no chain found are likely, and the evidence and the "
            "weighted estimates miss them",
        )
    ]
