"""Diagnostics of a population sampler (``smc``): each chain's population read as a
whole, not each particle as a chain of its own.

A chain of ``smc`` is an independent sequential Monte Carlo run: at the end of its
warm-up (the tempering) its ``N`` particles are an approximate sample of the target,
and after it each particle is a Markov chain (a random-walk Metropolis chain with a
fixed proposal) started from its place in that sample. Iteration ``t`` records particle
``t mod N``: a chain's post-warm-up draws are ``S`` whole sweeps of its population,
shape ``(S, N)`` per parameter (:func:`core.diagnostics.autocorr.by_walker`).

Reading each particle as a chain (as ``ensemble``'s walkers) asks each particle to mix
on its own. A particle need not: its starting point was drawn by the population, not by
itself, and on separated modes it never leaves the one it sits in, while the population
carries every mode with its weight. R-hat over particles then compares particles in
different modes and warns on a right run, however long. The unit to compare is the
chain's whole population: different chains are independent runs, the particles of one
chain are not.

This is how SMC is judged elsewhere too: with several independent runs, R-hat across
runs, each run's particles pooled and not split (the R package redist's SMC
diagnostics; PyMC's ``sample_smc`` with several chains gives ArviZ each run's final
particles as a chain), with the particles' effective sample size and its collapse at
the stages beside it. A run's own variance can be estimated from its genealogy (the
ancestor each particle descends from, Lee and Whiteley 2018; Chopin and
Papaspiliopoulos 2020), which the chains' states do not keep: hence the
bound below, checked against the chains' spread.

**A population's estimate and its error.** Of one parameter (or a function of it: its
normal scores, their folding, a quantile's indicator), particle ``i`` of chain ``c``
averages ``a_ci`` over the ``S`` sweeps, and the chain's estimate is
``m_c = mean_i a_ci``. A particle's average is the sum of two parts:

- what persists through the run, ``g_ci``: the mode the particle sits in, and, while
  the run is shorter than a few autocorrelation times, where it started. It was drawn
  by the tempering, whose resampling makes particles share ancestors: the ``N`` values
  are worth fewer independent ones;
- the noise of its own moves, independent between particles given their starts (every
  particle moves with its own random numbers).

The two halves of a particle's sweeps share the persistent part and have independent
noise, so the covariance over particles of the halves' averages estimates
``P = var(g)``, and the variance of the whole averages ``A = var_i(a_ci)`` is ``P`` plus
the noise's part. The variance of ``m_c`` is then taken as

    ``V_c = (kappa P + (A - P)) / N``,

the noise's part as for independent particles and the persistent part as for a
population of ``N / kappa`` independent ones. ``kappa`` is the sampler's
(:attr:`core.interface.sampler.Sampler.population`): for ``smc``, ``2 / ess_fraction`` (4 at the
default 0.5; with ``waste_free`` ``P``, ``P + 4 / ess_fraction``, its last population
being ``N / P`` ancestors' chains). Each stage keeps a conditional effective sample size of
``ess_fraction N`` before it resamples, and the stages compound: over 64 chains of the
separated two-mode mixture of BENCHMARKS.md section 12 (32 and 64 particles, seeds 1
and 2), the variance of a chain's share of one mode was 1.6 to 4.1 times the binomial
``p (1 - p) / N``. On a run long enough for the particles to forget where they
started, ``P`` is about 0 and ``V_c`` is ``N`` particles times each one's effective
draws (``S / tau``); on separated modes, ``V_c`` is that of ``N / kappa`` independent
draws of the mode, however long the run. So a chain's effective draws are ``N`` times
each particle's where the particles forget their starts, and ``N / kappa`` for what
they cannot forget (the modes): never more than the resampled particles allow.

**R-hat.** Gelman and Rubin's potential scale reduction compares the between-chain
variance of the chains' means, ``B``, with what the chains' own errors explain. With
chains of ``n`` independent draws, ``var+ = (n - 1) / n W + B`` (``W`` the mean
within-chain variance) and ``R^2 = var+ / W = 1 + (B - W / n) / W``: ``W / n`` is the
variance of a chain's mean. A population's is ``V_c``, so here

    ``R^2 = 1 + max(0, B - q V) / W``,

with ``V`` the mean of the ``V_c`` and ``q`` the 99% point of ``chi^2_{M - 1} / (M - 1)``
(``M`` chains): ``R`` passes 1 only where the chains' means disagree by more than their
Monte Carlo error makes them at the 1% level, and measures the excess. Without ``q``:
``B`` is an estimate from ``M`` values, as noisy as ``chi^2_{M - 1}``, and where a
chain's error is large against ``W`` (separated modes: ``V / W`` about ``kappa / N``)
a right run would pass 1.01 often (8 chains of 32 particles: ``B`` above ``V +
0.02 W`` is ``chi^2_7 / 7`` above about 1.2 if ``kappa`` were exact, one time in
three). As in Vehtari et al. (2021), it is computed on the normal scores of the ranks
of every draw and of their distances from the median, and the larger is reported; the
same 1.01 warns (``rhat``). With one chain, its two halves of sweeps are the units.
The chains are not split: a population at the end of the tempering is already a sample
of the target (a tempering that did not reach it says ``smc_unfinished``).

**ESS.** The variance of the mean over every chain is the larger of ``V / M`` and of
``B / M`` (the chains' spread, which is what an honest error is, where there are
chains enough to measure it), and the ESS is the pooled variance over it, at most the
number of draws: bulk on the normal scores, tail on the indicators of the 5% and 95%
quantiles (the smaller), as :mod:`core.diagnostics.summary`, and the MCSE of the mean on the
draws themselves.

**Chain means.** ``chain_mean`` names a chain whose mean of the normal scores lies more
than :data:`core.diagnostics.convergence.CHAIN_Z_MAX` of its standard errors from the other chains':
``z_c = (m_c - m_rest) / sqrt(V_c + sum_rest V / (M - 1)^2)``, where a population that
found a different mixture of the modes, or collapsed into one, is far.

**A short run.** The estimates above hold however few the sweeps, as long as the
tempering's population is right, and a short run's particles keep much of where they
started, which the persistent part counts ``kappa`` times. emcee's rule of 50
autocorrelation times (``ensemble``'s ``short_run``) asks each walker to forget its
start; a population need not, and its estimate of ``tau`` from a run of ``S`` sweeps
saturates near ``S / 12`` whatever the true ``tau`` (per particle, about its own mean),
so that no rule on it can tell a short run. ``short_run`` here warns when more than
:data:`MAX_UNMOVED` of the particles did not move at all after warm-up: the draws are
then the tempering's population, resampled copies included, and little else.
``autocorrelation_time`` is still reported (over the particles that moved), for the
evaluations per effective draw of one particle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.special
import scipy.stats

from kameleon.core.diagnostics.autocorr import integrated_time
from kameleon.core.diagnostics.convergence import chain_mean_findings
from kameleon.core.diagnostics.findings import Finding
from kameleon.core.diagnostics.summary import ParameterSummary
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "AGREEMENT_LEVEL",
    "MAX_UNMOVED",
    "MIN_CHAIN_PARTICLES",
    "Population",
    "population_findings",
    "population_summaries",
    "population_times",
    "short_run_findings",
]

#: The chains' means disagreeing past this quantile of their Monte Carlo error count
#: toward R-hat.
AGREEMENT_LEVEL = 0.99
#: A share of particles that did not move after warm-up above this warns
#: (``short_run``): at the moves' target acceptance of 0.25, a run under 5 sweeps.
MAX_UNMOVED = 0.25

#: ``chain_mean`` needs this many particles per chain: a chain's error is estimated from
#: its particles' averages, and with fewer that estimate is too rough (a chi-square of
#: under 15 degrees of freedom) to compare chains by.
MIN_CHAIN_PARTICLES = 16

_BLOM = 3 / 8


@dataclass(frozen=True, slots=True)
class Population:
    """One function of one parameter, over the units compared (the chains, or one
    chain's two halves): each unit's mean, the variance of that mean (``V_c``), and its
    draws' variance."""

    means: FloatArray
    errors: FloatArray
    within: FloatArray

    @classmethod
    def of(cls, y: FloatArray, kappa: float) -> Population:
        """``y`` of shape ``(units, sweeps, particles)``, at least 2 sweeps."""
        units, sweeps, n = y.shape
        a = y.mean(axis=1)
        half = sweeps // 2
        first, last = y[:, :half].mean(axis=1), y[:, sweeps - half :].mean(axis=1)
        whole = np.var(a, axis=1, ddof=1) if n > 1 else np.zeros(units)
        if n > 1:
            centred = (first - first.mean(axis=1, keepdims=True)) * (
                last - last.mean(axis=1, keepdims=True)
            )
            persistent = np.clip(centred.sum(axis=1) / (n - 1), 0.0, whole)
        else:
            persistent = np.zeros(units)
        errors = (kappa * persistent + (whole - persistent)) / n
        within = np.var(y.reshape(units, -1), axis=1, ddof=1)
        return cls(a.mean(axis=1), errors, within)

    def spread(self) -> float:
        """``B``, the variance of the units' means (0 for one unit)."""
        return float(np.var(self.means, ddof=1)) if self.means.size > 1 else 0.0

    def rhat(self) -> float:
        """``sqrt(1 + max(0, B - q V) / W)``; NaN for constant draws."""
        units = self.means.size
        w = float(self.within.mean())
        if not w > 0 or units < 2:
            return math.nan
        q = float(scipy.stats.chi2.ppf(AGREEMENT_LEVEL, units - 1)) / (units - 1)
        excess = max(0.0, self.spread() - q * float(self.errors.mean()))
        return math.sqrt(1.0 + excess / w)

    def variance_of_mean(self) -> float:
        """The variance of the mean over every unit: ``max(V, B) / units``."""
        units = self.means.size
        return max(float(self.errors.mean()), self.spread()) / units

    def ess(self, y: FloatArray) -> float:
        """The pooled variance of ``y`` over :meth:`variance_of_mean`, at most its size;
        NaN for constant draws."""
        total = float(np.var(y, ddof=1))
        if not total > 0:
            return math.nan
        v = self.variance_of_mean()
        return float(y.size) if v <= 0 else min(float(y.size), total / v)

    def z(self) -> FloatArray:
        """Each unit's mean minus the others', in their standard errors."""
        m = self.means.size
        if m < 2:
            return np.full(m, math.nan)
        rest = (self.means.sum() - self.means) / (m - 1)
        difference = self.means - rest
        error = np.sqrt(self.errors + (self.errors.sum() - self.errors) / (m - 1) ** 2)
        difference[np.abs(difference) < 1e-9] = 0.0  # scores are of order one: rounding
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(difference / error, dtype=np.float64)


def _scores(values: FloatArray) -> FloatArray:
    """Normal scores of the average ranks of every entry (Blom's offset)."""
    ranks = scipy.stats.rankdata(values.ravel(), method="average")
    scores = scipy.special.ndtri((ranks - _BLOM) / (values.size + 1 - 2 * _BLOM))
    return np.asarray(scores, dtype=np.float64).reshape(values.shape)


def _folded(values: FloatArray) -> FloatArray:
    with np.errstate(over="ignore"):
        return np.asarray(np.abs(values - np.median(values)), dtype=np.float64)


def _units(y: FloatArray) -> FloatArray:
    """The chains, or one chain's first and last halves of sweeps."""
    if y.shape[0] > 1:
        return y
    half = y.shape[1] // 2
    return np.concatenate((y[:, :half], y[:, y.shape[1] - half :]))


def _parameter(name: str, y: FloatArray, kappa: float) -> ParameterSummary:
    nan = math.nan
    finite = bool(np.isfinite(y).all())
    mean = float(np.mean(y)) if finite else nan
    sd = float(np.std(y, ddof=1)) if finite else nan
    if not finite or y.shape[1] < 2 or np.ptp(y) == 0:
        return ParameterSummary(
            name=name, mean=mean, sd=sd, mcse_mean=nan, ess_bulk=nan, ess_tail=nan, r_hat=nan
        )
    scores = _scores(y)
    folded = _scores(_folded(y))
    rhat = float(
        np.fmax(
            Population.of(_units(scores), kappa).rhat(),
            Population.of(_units(folded), kappa).rhat(),
        )
    )
    bulk = Population.of(scores, kappa).ess(scores)
    flat = y.ravel()
    tails = []
    for p in (0.05, 0.95):
        k = math.floor((flat.size - 1) * p)
        indicator = (y <= np.partition(flat, k)[k]).astype(np.float64)
        tails.append(Population.of(indicator, kappa).ess(indicator))
    raw = Population.of(y, kappa)
    return ParameterSummary(
        name=name,
        mean=mean,
        sd=sd,
        mcse_mean=math.sqrt(raw.variance_of_mean()),
        ess_bulk=bulk,
        ess_tail=float(np.fmin(tails[0], tails[1])),
        r_hat=rhat,
    )


def population_summaries(
    walkers: npt.ArrayLike, names: Sequence[str], kappa: float
) -> list[ParameterSummary]:
    """The diagnostics of every parameter of a population sampler's post-warm-up draws,
    ``(chains, sweeps, N, dim)`` (at least 2 sweeps), each chain's population read as a
    whole (see the module docstring; ``kappa`` the sampler's inflation)."""
    x = np.asarray(walkers, dtype=np.float64)
    if len(names) != x.shape[3]:
        raise ValueError(f"{len(names)} names for {x.shape[3]} parameters")
    return [
        _parameter(name, np.ascontiguousarray(x[..., k]), kappa) for k, name in enumerate(names)
    ]


def population_findings(
    walkers: npt.ArrayLike, names: Sequence[str], kappa: float
) -> list[Finding]:
    """``chain_mean``: a chain whose population's mean of the normal scores lies more
    than :data:`core.diagnostics.convergence.CHAIN_Z_MAX` standard errors from the other chains' (one
    finding per chain, its worst parameter). Not with fewer than
    :data:`MIN_CHAIN_PARTICLES` particles: a chain's error is then too rough to compare
    chains by."""
    x = np.asarray(walkers, dtype=np.float64)
    m, _, n, d = x.shape
    judged = [k for k in range(d) if np.isfinite(x[..., k]).all() and np.ptp(x[..., k]) > 0]
    if m < 2 or n < MIN_CHAIN_PARTICLES or not judged:
        return []
    z = np.stack([Population.of(_scores(x[..., k]), kappa).z() for k in judged], axis=1)
    return chain_mean_findings(
        z,
        names,
        judged,
        what="population mean",
        errors="standard errors",
        why="its population found another mixture of the modes, or collapsed.",
    )


def population_times(walkers: npt.ArrayLike) -> list[float]:
    """emcee's integrated autocorrelation time of each parameter (:mod:`core.diagnostics.autocorr`),
    in sweeps, over every particle of every chain that moved after warm-up: a particle
    that did not (in a short run, at a low acceptance) has no autocorrelation of its
    own, and leaving it out keeps the others' (NaN when none moved)."""
    x = np.asarray(walkers, dtype=np.float64)
    chains, sweeps, n, d = x.shape
    steps = x.transpose(1, 0, 2, 3).reshape(sweeps, chains * n, d)
    times = []
    for k in range(d):
        column = steps[:, :, k]
        moved = np.ptp(column, axis=0) > 0 if sweeps else np.zeros(chains * n, dtype=bool)
        times.append(integrated_time(column[:, moved]) if moved.any() else math.nan)
    return times


def short_run_findings(walkers: npt.ArrayLike) -> list[Finding]:
    """``short_run``: more than :data:`MAX_UNMOVED` of the particles (of every chain) did
    not move after warm-up, whatever the parameter."""
    x = np.asarray(walkers, dtype=np.float64)
    sweeps = x.shape[1]
    if sweeps < 2:
        return []
    still = np.all(x == x[:, :1], axis=(1, 3))
    share = float(np.mean(still))
    if share <= MAX_UNMOVED:
        return []
    return [
        Finding(
            "short_run",
            None,
            None,
            share,
            MAX_UNMOVED,
            f"{share:.0%} of the particles did not move in the {sweeps} sweeps after "
            f"warm-up (over {MAX_UNMOVED:.0%}): the draws are the tempering's population "
            "and little else, its resampled copies included.",
        )
    ]
