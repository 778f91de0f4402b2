"""Told results for any sampler in tests: a log density alone, or with its gradient for
a sampler that needs one, or in parts for one told them (``sgld``; see
:class:`kameleon.core.interface.sampler.Evaluation`).

A target told in parts is a model of one datum (``data_size`` 1, :data:`OPTIONS`): its
"log prior" is the log density and its log likelihood 0, so the told value, the estimate
``log_prior + (N / n) log_likelihood``, is the log density."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kameleon.core.interface.chain import Parts, Proposal, StepInfo
from kameleon.core.interface.sampler import Sampler, tell_one

__all__ = ["OPTIONS", "for_sampler", "numeric_gradient", "options", "tell", "two_modes"]

#: The options a sampler cannot go without, for the tests that run every sampler.
OPTIONS: dict[str, dict[str, Any]] = {"sgld": {"data_size": 1}}


def options(name: str, **more: Any) -> dict[str, Any]:
    """``name``'s required options (:data:`OPTIONS`) with ``more``."""
    return {**OPTIONS.get(name, {}), **more}


def numeric_gradient(fn: Callable[[np.ndarray], float], x: Any, h: float = 1e-6) -> np.ndarray:
    """Central differences of ``fn`` at ``x`` (0 where they are not finite: at the edge
    of a support), accurate to about ``1e-9`` relative on the smooth test targets."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h * max(1.0, abs(x[i]))
        d = (fn(x + e) - fn(x - e)) / (2.0 * e[i])
        out[i] = d if np.isfinite(d) else 0.0
    return out


def for_sampler(sampler: Sampler[Any, Any], fn: Callable[[np.ndarray], float]) -> Any:
    """``fn`` as a runner evaluates it for ``sampler``: with its gradient if it needs one,
    in parts (a model of one datum) for a sampler told them."""
    if sampler.evaluation.parts:
        return lambda x, batch: (fn(x), 0.0, numeric_gradient(fn, x), np.zeros(np.size(x)))
    if sampler.tell_gradient is None:
        return fn
    return lambda x: (fn(x), numeric_gradient(fn, x))


def tell(
    sampler: Sampler[Any, Any],
    state: Any,
    params: Any,
    proposal: Proposal,
    value: float,
    fn: Callable[[np.ndarray], float] | None = None,
) -> tuple[Any, StepInfo]:
    """``sampler``'s tell of ``value`` at ``proposal``, with the gradient of ``fn`` there
    for a sampler that needs one (zeros without ``fn``)."""
    gradient = None
    if sampler.evaluation.parts:
        position = proposal.position
        g = np.zeros(position.size) if fn is None else numeric_gradient(fn, position)
        parts = Parts(value, 0.0, g, np.zeros(position.size))
        return tell_one(sampler, state, params, proposal, value, parts=parts)
    if sampler.tell_gradient is not None:
        position = proposal.position
        gradient = np.zeros(position.size) if fn is None else numeric_gradient(fn, position)
    return tell_one(sampler, state, params, proposal, value, gradient)


def two_modes(x: Any, mode: float) -> float:
    """Two unit Gaussians in 2-d at ``-(mode, mode)`` and ``(mode, mode)`` with weights 0.3
    and 0.7, normalised (``log Z = 0``): the separated mixture of the population tests."""
    v = np.asarray(x, dtype=np.float64)
    centre = np.array([mode, mode])
    a = math.log(0.3) - 0.5 * float(np.sum((v + centre) ** 2))
    b = math.log(0.7) - 0.5 * float(np.sum((v - centre) ** 2))
    top = max(a, b)
    return top + math.log(math.exp(a - top) + math.exp(b - top)) - math.log(2 * math.pi)
