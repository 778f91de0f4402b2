"""Convergence diagnostics: mean, sd, MCSE, bulk and tail ESS, rank-normalised split R-hat.

Implements Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021), "Rank-normalization,
folding, and localization: An improved R-hat for assessing convergence of MCMC",
*Bayesian Analysis* 16(2), 667-718, as Stan, the R package posterior and ArviZ do. The
draws of one parameter are an array of shape ``(chains, draws)``:

- *Split chains*: each chain becomes its first and its last ``draws // 2`` draws (the
  middle draw of an odd-length chain is left out).
- *Rank normalisation*: average ranks ``r`` over all ``S`` split draws become normal
  scores ``Φ⁻¹((r - 3/8) / (S + 1/4))`` (Blom's offset).
- *ESS*: the autocovariances of every chain (by FFT) are combined with the between-chain
  variance, summed over Geyer's initial positive sequence made monotone (Geyer 1992,
  "Practical Markov chain Monte Carlo", *Statistical Science* 7(4)), with the last
  positive even lag added once. The integrated autocorrelation time is
  kept at least ``1 / log10(S)``, so the ESS never exceeds ``S log10(S)``.
- *Bulk ESS* is the ESS of the rank-normalised split draws; *tail ESS* the smaller ESS
  of the indicators ``x <= q`` at the 5% and 95% sample quantiles.
- *R-hat* is the larger of the split R-hat of the rank-normalised draws and of the
  rank-normalised draws folded around their median.
- *MCSE of the mean* is ``sd / sqrt(ESS)``, with the ESS of the split draws themselves.

Degenerate input never raises or warns; it gives NaN where a statistic is undefined:

- fewer than :data:`MIN_DRAWS` draws per chain: ESS, R-hat and MCSE are NaN;
- any non-finite draw (NaN or ±inf): every statistic of that parameter is NaN, as in
  Stan and posterior (ArviZ 0.23 still ranks infinite draws);
- constant draws: ESS, R-hat and MCSE are NaN (the mean and a zero sd are reported).
  A constant parameter cannot be told apart from a stuck sampler; posterior and Stan
  return NaN too, where ArviZ 0.23 reports an ESS equal to the number of draws;
- chains that are each constant but not all equal (stuck at different points): R-hat is
  ``+inf``;
- one chain: R-hat compares its two halves, as Stan and posterior do (ArviZ 0.23 needs
  two chains and returns NaN).

The tail quantile indicators use the order statistic ``x_(k)``, ``k = floor((S - 1) p)``:
no draw lies strictly between two consecutive order statistics, so ``x <= x_(k)`` is
exactly ``x <= q`` for the interpolated (type 7) quantile ``q`` that ArviZ computes in
floating point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from kameleon.core.diagnostics.ess import (
    Ranked,
    ess,
    mcse_of_split,
    rank_rhat,
    split_chains,
    tail_ess,
)
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "MIN_DRAWS",
    "ParameterSummary",
    "chain_mean_z",
    "ess_bulk",
    "ess_mean",
    "ess_tail",
    "mcse_mean",
    "per_parameter",
    "rhat",
    "summarize",
]

MIN_DRAWS = 4
"""Draws per chain below which ESS, R-hat and MCSE are NaN."""


class ParameterSummary(TypedDict):
    """Diagnostics of one parameter; NaN where undefined, ``r_hat`` may be ``+inf``."""

    name: str
    mean: float
    sd: float
    mcse_mean: float
    ess_bulk: float
    ess_tail: float
    r_hat: float


def ess_bulk(draws: npt.ArrayLike) -> float:
    """Bulk effective sample size: the ESS of the rank-normalised split chains.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``.

    Returns
    -------
    float
        The bulk ESS; NaN when undefined (see the module docstring).
    """
    chains = _as_chains(draws)
    if not _assessable(chains):
        return math.nan
    return ess(Ranked.of(split_chains(chains)).scores())


def ess_mean(draws: npt.ArrayLike) -> float:
    """ESS of the mean: the ESS of the split chains themselves, not of their ranks.

    For quantities with a finite variance (ArviZ's ``ess(method="mean")``); this is the
    ESS behind :func:`mcse_mean`.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``.

    Returns
    -------
    float
        The ESS; NaN when undefined (see the module docstring).
    """
    chains = _as_chains(draws)
    if not _assessable(chains):
        return math.nan
    return ess(split_chains(chains))


def ess_tail(draws: npt.ArrayLike) -> float:
    """Tail effective sample size: the smaller ESS of the 5% and 95% quantile indicators.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``.

    Returns
    -------
    float
        The tail ESS; NaN when undefined. When only one of the two indicators is
        constant (a parameter with at least 95% of its draws tied at an extreme),
        the other one's ESS.
    """
    chains = _as_chains(draws)
    if not _assessable(chains):
        return math.nan
    return tail_ess(chains)


def rhat(draws: npt.ArrayLike) -> float:
    """Rank-normalised split R-hat: the larger of its bulk and folded versions.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``; one chain is enough.

    Returns
    -------
    float
        R-hat, close to 1 for chains that agree; NaN when undefined, ``+inf`` when
        every split chain is constant but not all at the same value. When only the
        folded version is undefined (draws taking two values equally often), the bulk
        version.
    """
    chains = _as_chains(draws)
    if not _assessable(chains):
        return math.nan
    ranked = Ranked.of(split_chains(chains))
    return rank_rhat(ranked, ranked.scores())


def mcse_mean(draws: npt.ArrayLike) -> float:
    """Monte Carlo standard error of the mean, ``sd / sqrt(ESS)``.

    The ESS is that of the split chains themselves, not of their ranks.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``.

    Returns
    -------
    float
        The MCSE of the mean; NaN when undefined (see the module docstring).
    """
    chains = _as_chains(draws)
    if not _assessable(chains):
        return math.nan
    return mcse_of_split(chains, _moments(chains)[1])


def chain_mean_z(draws: npt.ArrayLike) -> FloatArray:
    """How far each chain's mean lies from the other chains', in Monte Carlo standard errors.

    On the normal scores of the ranks of all draws pooled (the chains not split), so a
    heavy tail cannot make the means meaningless: for chain ``c``,
    ``z_c = (m_c - m_rest) / sqrt(mcse_c**2 + mcse_rest**2)``, where ``m_c`` is the mean
    score of chain ``c``, ``m_rest`` the mean of the other chains' mean scores,
    ``mcse_c = sd_c / sqrt(ESS_c)`` with ``ESS_c`` the split ESS of chain ``c`` alone,
    and ``mcse_rest = sqrt(sum of the other chains' mcse**2) / (chains - 1)``.

    Where R-hat asks whether the chains agree, this says which chain does not; and one
    stray chain among many moves R-hat little (by about ``delta**2 / (2 chains)`` for a
    chain ``delta`` standard deviations off), while its ``z`` grows with its length.

    Parameters
    ----------
    draws
        Draws of one parameter, shape ``(chains, draws)``.

    Returns
    -------
    numpy.ndarray
        Shape ``(chains,)``. NaN when undefined: one chain, fewer than :data:`MIN_DRAWS`
        draws, or a non-finite draw. A constant chain has no Monte Carlo error of its
        own; ``z`` is ``±inf`` when every error is zero but the means differ, and NaN
        when they do not differ either.
    """
    chains = _as_chains(draws)
    m = chains.shape[0]
    if m < 2 or not _assessable(chains):
        return np.full(m, math.nan)
    scores = Ranked.of(chains).scores()
    means = scores.mean(axis=1)
    variance = np.zeros(m)
    for c in range(m):
        if np.ptp(scores[c]) > 0:
            variance[c] = np.var(scores[c], ddof=1) / ess(split_chains(scores[c : c + 1]))
    difference = means - (means.sum() - means) / (m - 1)
    error = np.sqrt(np.maximum(variance + (variance.sum() - variance) / (m - 1) ** 2, 0.0))
    # Scores are of order one: a difference below 1e-9 is rounding, not disagreement.
    difference[np.abs(difference) < 1e-9] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(difference / error, dtype=np.float64)


def per_parameter(statistic: Callable[[FloatArray], float], draws: npt.ArrayLike) -> FloatArray:
    """``statistic`` (one of the one-parameter functions above) of every parameter.

    Parameters
    ----------
    statistic
        For example :func:`ess_mean` or :func:`mcse_mean`.
    draws
        Shape ``(chains, draws, ...)``: every trailing index is one parameter.

    Returns
    -------
    numpy.ndarray
        Shape ``draws.shape[2:]``.
    """
    values = np.asarray(draws, dtype=np.float64)
    if values.ndim < 2:
        raise ValueError("draws must have shape (chains, draws, ...)")
    flat = values.reshape(*values.shape[:2], -1)
    out = np.array([statistic(flat[:, :, k]) for k in range(flat.shape[2])])
    return out.reshape(values.shape[2:])


def summarize(draws: npt.ArrayLike, names: Sequence[str]) -> list[ParameterSummary]:
    """Diagnostics of every parameter of a run.

    Parameters
    ----------
    draws
        Shape ``(chains, draws, dim)``.
    names
        The ``dim`` parameter names, in order.

    Returns
    -------
    list of ParameterSummary
        One summary per parameter, in order, with plain Python floats: NaN where a
        statistic is undefined, and ``r_hat`` ``+inf`` for chains stuck at different
        points (see the module docstring).

    Raises
    ------
    ValueError
        If ``draws`` is not three-dimensional or ``names`` does not have one name per
        parameter.
    """
    values = np.asarray(draws, dtype=np.float64)
    if values.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, dim), not {values.shape}")
    if len(names) != values.shape[2]:
        raise ValueError(f"{len(names)} names for {values.shape[2]} parameters")
    return [
        _summarize_parameter(name, np.ascontiguousarray(values[:, :, i]))
        for i, name in enumerate(names)
    ]


def _summarize_parameter(name: str, chains: FloatArray) -> ParameterSummary:
    """The summary of one parameter's ``(chains, draws)`` array, sharing the ranking."""
    nan = math.nan
    mean, sd = _moments(chains)
    if not _assessable(chains):
        return ParameterSummary(
            name=name, mean=mean, sd=sd, mcse_mean=nan, ess_bulk=nan, ess_tail=nan, r_hat=nan
        )
    ranked = Ranked.of(split_chains(chains))
    bulk = ranked.scores()
    return ParameterSummary(
        name=name,
        mean=mean,
        sd=sd,
        mcse_mean=mcse_of_split(chains, sd),
        ess_bulk=ess(bulk),
        ess_tail=tail_ess(chains),
        r_hat=rank_rhat(ranked, bulk),
    )


def _as_chains(draws: npt.ArrayLike) -> FloatArray:
    """``draws`` as a float64 array of shape ``(chains, draws)``; ValueError otherwise."""
    chains = np.asarray(draws, dtype=np.float64)
    if chains.ndim != 2:
        raise ValueError(f"draws must have shape (chains, draws), not {chains.shape}")
    return chains


def _assessable(chains: FloatArray) -> bool:
    """Whether ESS, R-hat and MCSE are defined: enough draws, all of them finite."""
    return chains.shape[0] >= 1 and chains.shape[1] >= MIN_DRAWS and bool(np.isfinite(chains).all())


def _moments(chains: FloatArray) -> tuple[float, float]:
    """Mean and sd (``ddof=1``) of all draws; NaN when undefined or not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.mean(chains) if chains.size >= 1 else math.nan
        sd = np.std(chains, ddof=1) if chains.size >= 2 else math.nan
    return (
        float(mean) if np.isfinite(mean) else math.nan,
        float(sd) if np.isfinite(sd) else math.nan,
    )
