"""The estimators behind :mod:`core.diagnostics.summary`: split chains, rank normalisation, the
autocovariance-based effective sample size, and split R-hat (Vehtari et al. 2021).

Each function takes chains of one parameter, shape ``(chains, draws)``, already checked
by :mod:`core.diagnostics.summary`; see its docstring for the conventions (ties, folding, the
tail quantiles, one chain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import scipy.fft
import scipy.special

from kameleon.core.interface.chain import FloatArray

__all__ = [
    "Ranked",
    "ess",
    "mcse_of_split",
    "rank_rhat",
    "split_chains",
    "split_rhat",
    "tail_ess",
]

TAIL_PROBABILITIES = (Fraction(1, 20), Fraction(19, 20))
BLOM_OFFSET = 3 / 8


def split_chains(chains: FloatArray) -> FloatArray:
    """Each chain's first and last ``draws // 2`` draws as separate chains."""
    half = chains.shape[1] // 2
    return np.concatenate((chains[:, :half], chains[:, chains.shape[1] - half :]))


@dataclass(frozen=True, slots=True)
class Ranked:
    """Split chains sorted once, for rank normalisation of them and of their folding.

    ``sorted_values[i]`` is ``chains.flat[order[i]]``.
    """

    shape: tuple[int, ...]
    order: npt.NDArray[np.intp]
    sorted_values: FloatArray

    @classmethod
    def of(cls, chains: FloatArray) -> Ranked:
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
        normal = scipy.special.ndtri((average_rank - BLOM_OFFSET) / (size + 1 - 2 * BLOM_OFFSET))
        scores = np.empty(size)
        scores[self.order] = np.repeat(normal, counts)
        return scores.reshape(self.shape)

    def folded(self) -> Ranked:
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
        return Ranked(self.shape, self.order[by_distance], distance[by_distance])


def rank_rhat(ranked: Ranked, scores: FloatArray) -> float:
    """The larger of the bulk and folded split R-hat; ``scores`` is ``ranked.scores()``."""
    return float(np.fmax(split_rhat(scores), split_rhat(ranked.folded().scores())))


def split_rhat(chains: FloatArray) -> float:
    """Gelman-Rubin R-hat of (already split) chains of normal scores."""
    if np.ptp(chains) == 0:
        return math.nan
    if np.ptp(chains, axis=1).max() == 0:
        return math.inf
    draws = chains.shape[1]
    within = np.mean(np.var(chains, axis=1, ddof=1))
    between = draws * np.var(np.mean(chains, axis=1), ddof=1)
    return float(np.sqrt((between / within + draws - 1) / draws))


def tail_ess(chains: FloatArray) -> float:
    """The smaller ESS of the indicators of the 5% and 95% quantiles."""
    flat = chains.ravel()
    ks = [math.floor((flat.size - 1) * p) for p in TAIL_PROBABILITIES]
    quantiles = np.partition(flat, ks)[ks]
    lower, upper = (ess(split_chains((chains <= q).astype(np.float64))) for q in quantiles)
    return float(np.fmin(lower, upper))


def mcse_of_split(chains: FloatArray, sd: float) -> float:
    """``sd / sqrt(ESS)`` with the ESS of the split draws."""
    return sd / math.sqrt(ess(split_chains(chains)))


def ess(chains: FloatArray) -> float:
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
