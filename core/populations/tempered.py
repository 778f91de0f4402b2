"""Tempered targets: the densities ``pi_beta(x) ∝ exp(a(x) + beta l(x))`` that
``tempering`` and ``smc`` move along, from ``beta = 0`` (``exp(a)``, a reference
Gaussian or the prior) to ``beta = 1`` (the target), and the split of a told result into
its ``a + l`` and ``l``.

- ``tempered: "likelihood"``: the results tell the log prior and the log likelihood
  apart (:class:`core.interface.chain.Parts`); ``a`` is the log prior, ``l`` the log likelihood.
- ``tempered: "reference"``: the results tell the log density ``log pi`` alone, and
  ``a = log ref``, ``l = log pi - log ref`` for the reference Gaussian
  ``ref = N(reference_mean, reference_sd^2 I)``.

A power of an unbiased estimate is not an unbiased estimate of the power, so these
samplers need the density itself (:func:`pseudo_marginal_refusal`).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol

import numpy as np

from kameleon.core.interface.chain import FloatArray, Parts
from kameleon.core.numerics.arithmetic import log1
from kameleon.core.numerics.matrices import dot

__all__ = [
    "TemperedParams",
    "likelihood_split",
    "log_reference",
    "needs_parts",
    "parts_value",
    "pseudo_marginal_refusal",
    "reference_split",
    "split_parts",
]


class TemperedParams(Protocol):
    """The options that define the tempered targets, shared with ``smc``."""

    @property
    def dim(self) -> int: ...

    @property
    def tempered(self) -> Literal["reference", "likelihood"]: ...

    @property
    def reference_mean(self) -> float: ...

    @property
    def reference_sd(self) -> float: ...


def log_reference(params: TemperedParams, x: FloatArray) -> float:
    """The reference Gaussian's log density at ``x``, ``N(reference_mean,
    reference_sd^2 I)``."""
    s = params.reference_sd
    u = (np.asarray(x) - params.reference_mean) / s
    with np.errstate(over="ignore", invalid="ignore"):
        q = dot(u, u)  # the same bits on every CPU
    return -0.5 * q - params.dim * (log1(s) + 0.5 * log1(2 * math.pi))


def reference_split(
    params: TemperedParams, position: FloatArray, logdensity: float
) -> tuple[float, float]:
    """A told log density of the ``"reference"`` mode as the told value ``a + l`` and its
    ``l = log pi - log ref`` (``-inf``: outside the support, or a point the reference gives
    no density to); a ``ValueError`` in the ``"likelihood"`` mode, or for a value that is
    not a number below ``+inf``."""
    if params.tempered != "reference":
        raise ValueError(
            "tempered 'likelihood' needs log_prior and log_likelihood apart at every point"
        )
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    base = log_reference(params, position)
    if logdensity == -math.inf or not math.isfinite(base):
        return float(logdensity), -math.inf
    return float(logdensity), float(logdensity) - base


def likelihood_split(parts: Parts) -> tuple[float, float]:
    """Told parts as the value ``log_prior + log_likelihood`` and the log likelihood
    (``-inf`` where the log prior is); a ``ValueError`` for parts that are not numbers."""
    lp, ll = float(parts.log_prior), float(parts.log_likelihood)
    if math.isnan(lp) or lp == math.inf:
        raise ValueError("log prior must be a number or -inf")
    if lp == -math.inf:
        ll = -math.inf
    elif not math.isfinite(ll):
        raise ValueError("log likelihood must be finite where the log prior is")
    return lp + ll, ll


def split_parts(params: TemperedParams, position: FloatArray, parts: Parts) -> tuple[float, float]:
    """Told parts as the told value and its ``l``: in the ``"likelihood"`` mode the log
    likelihood, in the ``"reference"`` mode their sum against the reference
    (:func:`reference_split`)."""
    value, loglik = likelihood_split(parts)
    if params.tempered == "reference":
        return reference_split(params, position, value)
    return value, loglik


def parts_value(params: Any, parts: Parts) -> float:
    """The value told parts stand for: ``log_prior + log_likelihood``."""
    return float(parts.log_prior) + float(parts.log_likelihood)


def pseudo_marginal_refusal(params: Any) -> str:
    """Why an unbiased estimate of the density will not do for a sampler of tempered
    densities (``tempering``, ``smc``; see ``Sampler``)."""
    return (
        "evaluates tempered copies of the density in each transition, and a tempered "
        "unbiased estimate is not an unbiased estimate of the tempered density: "
        "pseudo_marginal needs a sampler of the target itself"
    )


def needs_parts(params: TemperedParams) -> bool:
    """Whether every result must tell the log prior and the log likelihood apart."""
    return params.tempered == "likelihood"
