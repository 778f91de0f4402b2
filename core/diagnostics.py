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
from dataclasses import dataclass
from fractions import Fraction
from typing import TypedDict

import numpy as np
import numpy.typing as npt
import scipy.fft
import scipy.special

from kameleon.core.base import FloatArray

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

_TAIL_PROBABILITIES = (Fraction(1, 20), Fraction(19, 20))
_BLOM_OFFSET = 3 / 8


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
    return _ess(_Ranked.of(_split(chains)).scores())


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
    return _ess(_split(chains))


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
    return _tail_ess(chains)


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
    ranked = _Ranked.of(_split(chains))
    return _rank_rhat(ranked, ranked.scores())


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
    return _mcse_mean(chains, _moments(chains)[1])


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
    scores = _Ranked.of(chains).scores()
    means = scores.mean(axis=1)
    variance = np.zeros(m)
    for c in range(m):
        if np.ptp(scores[c]) > 0:
            variance[c] = np.var(scores[c], ddof=1) / _ess(_split(scores[c : c + 1]))
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
    ranked = _Ranked.of(_split(chains))
    bulk = ranked.scores()
    return ParameterSummary(
        name=name,
        mean=mean,
        sd=sd,
        mcse_mean=_mcse_mean(chains, sd),
        ess_bulk=_ess(bulk),
        ess_tail=_tail_ess(chains),
        r_hat=_rank_rhat(ranked, bulk),
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


def _split(chains: FloatArray) -> FloatArray:
    """Each chain's first and last ``draws // 2`` draws as separate chains."""
    half = chains.shape[1] // 2
    return np.concatenate((chains[:, :half], chains[:, chains.shape[1] - half :]))


@dataclass(frozen=True, slots=True)
class _Ranked:
    """Split chains sorted once, for rank normalisation of them and of their folding.

    ``sorted_values[i]`` is ``chains.flat[order[i]]``.
    """

    shape: tuple[int, ...]
    order: npt.NDArray[np.intp]
    sorted_values: FloatArray

    @classmethod
    def of(cls, chains: FloatArray) -> _Ranked:
        """``chains`` sorted."""
        flat = chains.ravel()
        order = np.argsort(flat)
        return cls(chains.shape, order, flat[order])

    def scores(self) -> FloatArray:
        """Normal scores of the average ranks, in the shape of the chains."""
        size = self.sorted_values.size
        starts_tie = np.empty(size, dtype=bool)
        starts_tie[0] = True
        np.not_equal(self.sorted_values[1:], self.sorted_values[:-1], out=starts_tie[1:])
        starts = np.flatnonzero(starts_tie)
        counts = np.diff(starts, append=size)
        # Ties share the mean of the 1-based positions start + 1 .. start + count.
        average_rank = starts + (counts + 1) / 2
        normal = scipy.special.ndtri((average_rank - _BLOM_OFFSET) / (size + 1 - 2 * _BLOM_OFFSET))
        scores = np.empty(size)
        scores[self.order] = np.repeat(normal, counts)
        return scores.reshape(self.shape)

    def folded(self) -> _Ranked:
        """The distances of the draws from their median, ranked."""
        size = self.sorted_values.size
        middle = self.sorted_values[[(size - 1) // 2, size // 2]]
        median = 0.5 * middle[0] + 0.5 * middle[1]
        # Distances beyond the float range become inf (and tie), without a warning.
        with np.errstate(over="ignore"):
            distance = np.abs(self.sorted_values - median)
        # ``distance`` falls and then rises: two sorted runs, which a stable sort
        # (timsort) merges in linear time.
        by_distance = np.argsort(distance, kind="stable")
        return _Ranked(self.shape, self.order[by_distance], distance[by_distance])


def _rank_rhat(ranked: _Ranked, scores: FloatArray) -> float:
    """The larger of the bulk and folded split R-hat; ``scores`` is ``ranked.scores()``."""
    return float(np.fmax(_split_rhat(scores), _split_rhat(ranked.folded().scores())))


def _split_rhat(chains: FloatArray) -> float:
    """Gelman-Rubin R-hat of (already split) chains of normal scores."""
    if np.ptp(chains) == 0:
        return math.nan
    if np.ptp(chains, axis=1).max() == 0:
        return math.inf
    draws = chains.shape[1]
    within = np.mean(np.var(chains, axis=1, ddof=1))
    between = draws * np.var(np.mean(chains, axis=1), ddof=1)
    return float(np.sqrt((between / within + draws - 1) / draws))


def _tail_ess(chains: FloatArray) -> float:
    """The smaller ESS of the indicators of the 5% and 95% quantiles."""
    flat = chains.ravel()
    ks = [math.floor((flat.size - 1) * p) for p in _TAIL_PROBABILITIES]
    quantiles = np.partition(flat, ks)[ks]
    lower, upper = (_ess(_split((chains <= q).astype(np.float64))) for q in quantiles)
    return float(np.fmin(lower, upper))


def _mcse_mean(chains: FloatArray, sd: float) -> float:
    """``sd / sqrt(ESS)`` with the ESS of the split draws."""
    return sd / math.sqrt(_ess(_split(chains)))


def _ess(chains: FloatArray) -> float:
    """Effective sample size of (already split) chains of shape ``(m, n)``, ``n >= 2``.

    NaN for constant input.
    """
    n_chains, n = chains.shape
    # Draws near the float range overflow below; they give NaN, without a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.ptp(chains) == 0:
            return math.nan
        chain_means = chains.mean(axis=1)
        # Autocovariances by FFT, zero-padded against wrap-around; their mean over chains
        # is the inverse transform of the mean power spectrum.
        padded = scipy.fft.next_fast_len(2 * n, real=True)
        spectrum = scipy.fft.rfft(chains - chain_means[:, None], n=padded, axis=1)
        power = np.mean(spectrum.real**2 + spectrum.imag**2, axis=0)
        autocov = scipy.fft.irfft(power, n=padded)[:n] / n
        # W, the mean within-chain variance, and var+ = (n - 1) / n W + B / n.
        within = autocov[0] * n / (n - 1)
        var_plus = autocov[0]
        if n_chains > 1:
            var_plus += np.var(chain_means, ddof=1)
        rho = 1.0 - (within - autocov) / var_plus
    rho[0] = 1.0
    if not np.isfinite(rho).all():
        return math.nan

    # Geyer's initial positive sequence over the pair sums rho[2k] + rho[2k + 1],
    # k = 0 .. last: it stops at the first pair that is not positive (k_stop).
    last = max((n - 3) // 2, 0)
    pairs = rho[0 : 2 * last + 2 : 2] + rho[1 : 2 * last + 2 : 2]
    positive = pairs > 0
    k_stop = last if positive.all() else int(np.argmin(positive))
    # The stopping pair's even lag is added once if it is positive (this lowers the
    # variance for antithetic chains) or if the pair is kept (its sum is not negative).
    even = rho[2 * k_stop]
    tail = even if even > 0 or pairs[k_stop] >= 0 else 0.0
    # Initial monotone sequence: the pair sums made non-increasing.
    tau = -1.0 + 2.0 * np.minimum.accumulate(pairs[:k_stop]).sum() + tail
    size = n_chains * n
    tau = max(tau, 1.0 / math.log10(size))
    return float(size / tau)
