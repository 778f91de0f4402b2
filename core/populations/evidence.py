"""What importance weights say: the log evidence with its standard error, the effective
sample size, the Pareto-k diagnostic of the weights' tail, and weighted summaries of
the draws.

For draws ``x_i`` from proposals ``q`` and told log densities ``log p(x_i)`` (unnormalised),
the log weights are ``log w_i = log p(x_i) - log q(x_i)`` and:

- ``Z = mean(w)`` estimates the normalising constant of ``p`` (the evidence when ``p``
  is prior times likelihood), without bias; its standard error is ``sd(w) / sqrt(n)``,
  and that of ``log Z`` is the relative error ``sd(w) / (sqrt(n) mean(w))`` (the delta
  method; trusted only while the Pareto k below is small).
- The effective sample size is Kish's ``(sum w)^2 / sum w^2``.
- The Pareto k (Vehtari, Simpson, Gelman, Yao and Gabry, "Pareto smoothed importance
  sampling", 2024): the shape of a generalised Pareto distribution fitted to the largest
  weights. Below 0.5 the weights' variance is finite and the estimates converge at the
  usual rate; between 0.5 and 0.7 slower but usefully; above 0.7 the estimates are
  unreliable whatever their reported error (the variance is infinite or nearly so).

Everything is computed from log weights, scaled by their maximum, so that no weight
overflows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kameleon.core.diagnostics.summary import ParameterSummary
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "K_BAD",
    "K_GOOD",
    "Evidence",
    "evidence",
    "pareto_k",
    "summaries",
    "weighted_moments",
]

#: Pareto k below this: the importance estimates are reliable.
K_GOOD = 0.5
#: Pareto k above this: the importance estimates are unreliable (Vehtari et al.'s
#: threshold for the sample sizes met in practice).
K_BAD = 0.7


@dataclass(frozen=True, slots=True)
class Evidence:
    """The importance weights' summary (see the module docstring). ``log_evidence`` is
    ``-inf`` and the rest NaN when every weight is zero."""

    log_evidence: float
    standard_error: float
    ess: float
    pareto_k: float
    draws: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "log_evidence": self.log_evidence,
            "standard_error": self.standard_error,
            "ess": self.ess,
            "pareto_k": self.pareto_k,
            "draws": self.draws,
        }


def evidence(log_weights: FloatArray) -> Evidence:
    """The summary of ``log_weights`` (any shape; ``-inf`` for a draw of zero weight;
    NaN is an error)."""
    lw = np.asarray(log_weights, dtype=np.float64).ravel()
    if np.any(np.isnan(lw)) or np.any(lw == math.inf):
        raise ValueError("log weights must be numbers below +inf")
    n = lw.size
    if n == 0 or not np.any(np.isfinite(lw)):
        return Evidence(-math.inf, math.nan, 0.0, math.nan, n)
    top = float(lw.max())
    w = np.exp(lw - top)
    mean = float(w.mean())
    log_z = top + math.log(mean)
    var = float(np.mean((w - mean) ** 2)) * n / max(n - 1, 1)
    se = math.sqrt(var / n) / mean
    ess = float(w.sum() ** 2 / np.sum(w * w))
    return Evidence(log_z, se, ess, pareto_k(lw), n)


def weighted_moments(draws: FloatArray, log_weights: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The self-normalised weighted mean and standard deviation of ``draws`` (``(n, d)``)
    under ``log_weights`` (``(n,)``); NaN where every weight is zero."""
    x = np.asarray(draws, dtype=np.float64)
    lw = np.asarray(log_weights, dtype=np.float64)
    if not np.any(np.isfinite(lw)):
        nan = np.full(x.shape[1], math.nan)
        return nan, nan
    w = np.exp(lw - lw.max())
    w /= w.sum()
    with np.errstate(over="ignore", invalid="ignore"):  # a draw past the float range
        mean = w @ x
        var = w @ (x - mean) ** 2
    return mean, np.sqrt(var)


def _gpd_fit(exceedances: FloatArray) -> float:
    """The shape ``k`` of a generalised Pareto distribution fitted to ``exceedances``
    (positive, sorted ascending) by Zhang and Stephens' (2009) empirical Bayes method,
    as PSIS fits it, with Vehtari et al.'s weakly informative prior toward 0.5."""
    x = exceedances
    n = x.size
    prior = 3.0
    m = 30 + int(math.sqrt(n))
    quartile = x[int(n / 4 + 0.5) - 1]
    b = 1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    b = b / (prior * quartile) + 1.0 / x[-1]
    k = np.log1p(-b[:, None] * x).mean(axis=1)
    len_scale = n * (np.log(-(b / k)) - k - 1.0)
    weights = 1.0 / np.exp(len_scale - len_scale[:, None]).sum(axis=1)
    keep = weights >= 10 * np.finfo(float).eps
    weights = weights[keep] / weights[keep].sum()
    b_post = float(np.sum(b[keep] * weights))
    k_hat = float(np.log1p(-b_post * x).mean())
    # Toward 0.5, with the weight of 10 observations (Vehtari et al., appendix).
    return (n * k_hat + 10 * 0.5) / (n + 10)


def pareto_k(log_weights: FloatArray) -> float:
    """The Pareto k of the weights' right tail: a generalised Pareto distribution fitted
    to the ``M = min(0.2 S, 3 sqrt(S))`` largest of ``S`` weights, above the next
    largest. NaN with fewer than 5 tail weights (too few draws, or too few of nonzero
    weight) or a tail of equal weights."""
    lw = np.asarray(log_weights, dtype=np.float64).ravel()
    lw = lw[np.isfinite(lw)]
    s = lw.size
    tail = math.ceil(min(0.2 * s, 3.0 * math.sqrt(s)))
    if tail < 5 or s <= tail:
        return math.nan
    lw = np.sort(lw)
    threshold = lw[-tail - 1]
    top = lw[-1]
    exceedances = np.exp(lw[-tail:] - top) - math.exp(threshold - top)
    if exceedances[-1] <= 0 or np.all(exceedances == exceedances[0]):
        return math.nan
    exceedances = exceedances[exceedances > 0]
    if exceedances.size < 5:
        return math.nan
    return _gpd_fit(exceedances)


def summaries(
    names: Sequence[str], draws: FloatArray, log_weights: FloatArray
) -> list[ParameterSummary]:
    """Per parameter, as :func:`core.diagnostics.summary.summarize` reports MCMC draws, for
    weighted draws ``(chains, draws, d)`` pooled: the weighted mean and sd, the Monte
    Carlo error of the mean ``sd / sqrt(ESS)``, Kish's ESS as both ESS figures, and no
    R-hat (the draws are not chains)."""
    x = np.asarray(draws, dtype=np.float64)
    d = x.shape[-1]
    flat, lw = x.reshape(-1, d), np.asarray(log_weights, dtype=np.float64).ravel()
    mean, sd = weighted_moments(flat, lw)
    ess = evidence(lw).ess if flat.shape[0] else 0.0
    mcse = sd / math.sqrt(ess) if ess > 0 else np.full(d, math.nan)
    return [
        ParameterSummary(
            name=name,
            mean=float(mean[k]),
            sd=float(sd[k]),
            mcse_mean=float(mcse[k]),
            ess_bulk=ess,
            ess_tail=ess,
            r_hat=math.nan,
        )
        for k, name in enumerate(names)
    ]
