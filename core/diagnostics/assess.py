"""What a run's post-warm-up draws say, for every runner (in process, the SDK, the
service): per-parameter diagnostics, the warnings, and for importance samples the
evidence (:mod:`core.populations.evidence`).

Markov chains are judged by :func:`core.diagnostics.summary.summarize` and
:func:`core.diagnostics.convergence.check`. An ensemble's chain (a sampler whose record gives
``ensemble_size``) interleaves its walkers: its parameters are summarised with each
walker's draws as a chain of its own (as ArviZ reads emcee's walkers), whole sweeps
only; the checks of a chain's own draws (``stuck``, ``chain_mean``) read its walkers
one after the other; and each parameter gets emcee's integrated autocorrelation time
(:mod:`core.diagnostics.autocorr`), with the ``short_run`` warning under 50 of them. A population
(a sampler whose record gives ``population`` too: ``smc``, whose particles start after
warm-up as a sample of the target) is read differently, by :mod:`core.diagnostics.population`: each
chain's whole population is the unit of R-hat, of the ESS and of ``chain_mean``, and
``short_run`` says that the particles did not move. A sampler
whose chains estimate the evidence in their states (its record's ``chain_evidence``:
``tempering``, ``smc``) adds that evidence and its warnings. Weighted draws (a sampler whose
record says ``weighted``) are not chains: they are weighed against the mixture of every chain's proposal (the
sampler's ``mixture_log_weights``), and judged by their weights: the Pareto k of their
tail and their effective sample size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.diagnostics.autocorr import MIN_TIMES, by_walker, integrated_time
from kameleon.core.diagnostics.convergence import check
from kameleon.core.diagnostics.findings import Finding
from kameleon.core.diagnostics.population import (
    population_findings,
    population_summaries,
    population_times,
    short_run_findings,
)
from kameleon.core.diagnostics.summary import MIN_DRAWS, ParameterSummary, summarize
from kameleon.core.interface.chain import FloatArray
from kameleon.core.interface.sampler import Sampler
from kameleon.core.populations.evidence import K_BAD, Evidence, evidence, summaries

__all__ = [
    "MAX_UNSEEN",
    "MIN_IMPORTANCE_ESS",
    "Assessment",
    "assess",
    "autocorrelation_times",
    "ensemble_findings",
    "importance_findings",
    "mode_findings",
    "summaries_of",
]

#: An effective sample size of the weights below this many per chain warns
#: (``importance_ess``): the bar of a Markov chain's ESS (``ESS_PER_CHAIN_MIN``), since
#: the weights' (Kish's) ESS is if anything the more optimistic of the two (it cannot
#: see what no proposal reached).
MIN_IMPORTANCE_ESS = 100.0


@dataclass(frozen=True, slots=True)
class Assessment:
    """Diagnostics per parameter, the warnings, and the evidence of weighted draws with
    the log weights it was computed from, shape ``(chains, draws)``, or the evidence of
    a sampler whose chains estimate it (``log_weights`` ``None``); ``None`` for other
    Markov chains. For an ensemble, each parameter's integrated autocorrelation time in
    sweeps (``None`` for other samplers, NaN where undefined)."""

    summaries: list[ParameterSummary]
    findings: list[Finding]
    evidence: Evidence | None = None
    log_weights: FloatArray | None = None
    autocorrelation_time: list[float] | None = None


def _walkers(sampler: Sampler[Any, Any], params: Any, draws: FloatArray) -> FloatArray | None:
    """An ensemble's post-warm-up ``draws`` as ``(chains, sweeps, W, dim)``, or ``None``
    for another sampler."""
    if sampler.ensemble_size is None:
        return None
    return by_walker(draws, sampler.ensemble_size(params), params.warmup + 1)


def summaries_of(
    sampler: Sampler[Any, Any], params: Any, draws: FloatArray, names: Sequence[str]
) -> list[ParameterSummary]:
    """:func:`core.diagnostics.summary.summarize` of a Markov sampler's post-warm-up ``draws``
    (``(chains, draws, dim)``); an ensemble's with each walker's whole sweeps as a chain,
    once there are :data:`core.diagnostics.summary.MIN_DRAWS` sweeps, and a population's
    (``smc``) with each chain's population read as a whole
    (:func:`core.diagnostics.population.population_summaries`)."""
    x = np.asarray(draws, dtype=np.float64)
    walkers = _walkers(sampler, params, x)
    if walkers is not None and walkers.shape[1] >= MIN_DRAWS:
        if sampler.population is not None:
            return population_summaries(walkers, names, sampler.population(params))
        chains, sweeps, w, d = walkers.shape
        x = walkers.transpose(0, 2, 1, 3).reshape(chains * w, sweeps, d)
    return list(summarize(x, names))


def _population_findings(
    findings: list[Finding],
    walkers: FloatArray,
    names: Sequence[str],
    kappa: float,
) -> list[Finding]:
    """A population's ``chain_mean`` in place of :func:`core.diagnostics.convergence.check`'s, which
    would compare a chain's particles read one after another."""
    own = population_findings(walkers, names, kappa)
    kept = [f for f in findings if f.code != "chain_mean"]
    # In the order of CODES: chain_mean comes after stuck, before the trajectories'.
    at = next((i for i, f in enumerate(kept) if f.code in ("divergent", "low_ebfmi")), len(kept))
    return [*kept[:at], *own, *kept[at:]]


def autocorrelation_times(walkers: FloatArray) -> list[float]:
    """emcee's integrated autocorrelation time of each parameter of an ensemble's
    draws, ``(chains, sweeps, W, dim)``: every walker of every chain averaged."""
    chains, sweeps, w, d = walkers.shape
    steps = walkers.transpose(1, 0, 2, 3).reshape(sweeps, chains * w, d)
    return [integrated_time(steps[:, :, i]) for i in range(d)]


def ensemble_findings(times: Sequence[float], sweeps: int, names: Sequence[str]) -> list[Finding]:
    """``short_run``: a parameter whose autocorrelation time is known and more than
    ``sweeps`` / :data:`core.diagnostics.autocorr.MIN_TIMES` (emcee's rule)."""
    found = []
    for name, tau in zip(names, times, strict=True):
        if math.isfinite(tau) and sweeps < MIN_TIMES * tau:
            found.append(
                Finding(
                    "short_run",
                    name,
                    None,
                    sweeps / tau,
                    MIN_TIMES,
                    f"the run is {sweeps / tau:.1f} autocorrelation times of {name} long "
                    f"({sweeps} sweeps, tau {tau:.1f}), under {MIN_TIMES:.0f}: its "
                    "estimates are not yet trusted.",
                )
            )
    return found


def importance_findings(ev: Evidence, chains: int = 1) -> list[Finding]:
    """The warnings of importance weights: a Pareto k above :data:`core.populations.evidence.K_BAD`
    (or none where the weights are all zero), an effective sample size below
    :data:`MIN_IMPORTANCE_ESS` per chain (``chains`` proposals)."""
    found = []
    minimum = MIN_IMPORTANCE_ESS * max(1, chains)
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
    if ev.ess < minimum:
        found.append(
            Finding(
                "importance_ess",
                None,
                None,
                ev.ess,
                minimum,
                f"the importance weights' effective sample size is {ev.ess:.0f}, under "
                f"{minimum:.0f} ({MIN_IMPORTANCE_ESS:.0f} per chain): the proposals fit "
                "the target poorly, and what they miss the weights cannot show",
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
        found_summaries = summaries_of(sampler, params, x, names)
        walkers = _walkers(sampler, params, x)
        judged = x
        if walkers is not None and walkers.shape[1] >= MIN_DRAWS:
            # Each walker's draws in a row: a chain's own MCSE (chain_mean) and its runs
            # (stuck) are then a walker's, not those of the interleaved walkers.
            chains, sweeps, w, d = walkers.shape
            judged = walkers.transpose(0, 2, 1, 3).reshape(chains, w * sweeps, d)
        findings = check(
            judged,
            names,
            acceptance if sampler.acceptance_checked else None,
            summaries=found_summaries,
            log_density=log_density,
            divergent=stats.get("diverging"),
            energy=stats.get("energy"),
        )
        times = None
        if walkers is not None:
            times = (
                autocorrelation_times(walkers)
                if sampler.population is None
                else population_times(walkers)
            )
            if x.shape[1] >= MIN_DRAWS and sampler.population is None:
                findings += ensemble_findings(times, walkers.shape[1], names)
            elif sampler.population is not None and walkers.shape[1] >= MIN_DRAWS:
                kappa = sampler.population(params)
                findings = _population_findings(findings, walkers, names, kappa)
                findings += short_run_findings(walkers)
        chain_ev = None
        if sampler.chain_evidence is not None and states is not None:
            # A sampler whose chains estimate the evidence in their states (tempering).
            chain_ev, chain_findings = sampler.chain_evidence(states, params)
            findings += chain_findings
        return Assessment(found_summaries, findings, chain_ev, autocorrelation_time=times)
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
    found = importance_findings(ev, chains)
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
