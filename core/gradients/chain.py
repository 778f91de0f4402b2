"""What every gradient sampler's chain has (``mala``, ``hmc``, ``nuts``): its shared
options checked, its shared state fields, the told gradient checked, and the tell of its
initial point.

Each such sampler's ``Params`` has ``step_size`` (``None``: from the gradient at the
initial point), ``target_acceptance``, ``adapt_step_size``, ``adapt_metric``, ``metric``
(``"diag"``, ``"dense"`` or ``"unit"``) and ``gradient_check``; its ``State`` has the
fields of :func:`new_gradient_fields` (the gradient at the position, the evaluations of
the transition in progress and in all, the gradient check, the step size and its dual
averaging, the inverse metric and its warm-up window).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kameleon.core.gradients.check import start_check
from kameleon.core.gradients.warmup import DualAveraging, MetricWindow, initial_step_size
from kameleon.core.interface.chain import FloatArray, StepInfo, frozen_array, new_chain_fields
from kameleon.core.interface.sampler import OptionError

__all__ = [
    "WARMUP_COLD_FIELDS",
    "check_gradient",
    "check_gradient_options",
    "initial_metric",
    "new_gradient_fields",
    "tell_initial_gradient",
]


#: The shared fields that change at most once per transition (and not at all after
#: warm-up): a sampler whose transition is many evaluations (``hmc``, ``nuts``) lists
#: them in its ``COLD_FIELDS``, so that a store writes them only when they change, not
#: at every point of a trajectory.
WARMUP_COLD_FIELDS = ("check", "adapt", "metric", "window")


def check_gradient_options(params: Any) -> None:
    """Raise :class:`OptionError` for a shared option out of range."""
    if params.step_size is not None and not (
        math.isfinite(params.step_size) and params.step_size > 0
    ):
        raise OptionError("step_size", "must be positive")
    if not 0 < params.target_acceptance < 1:
        raise OptionError("target_acceptance", "must be in (0, 1)")
    if params.gradient_check < 0:
        raise OptionError("gradient_check", "must be non-negative")


def new_gradient_fields(position: Any, params: Any, *, seed: int, chain: int) -> dict[str, Any]:
    """The fields of a new chain waiting for its initial point: :func:`new_chain_fields`
    and the shared ones of a gradient sampler; a sampler's ``init`` adds its own."""
    fields = new_chain_fields(position, seed=seed, chain=chain)
    d = fields["position"].size
    step_size = params.step_size if params.step_size is not None else 1.0
    return {
        **fields,
        "gradient": frozen_array(np.zeros(d)),
        "step": 0,
        "evaluations": 0,
        "check": start_check(chain, params.gradient_check),
        "adapt": DualAveraging.start(step_size),
        "step_size": step_size,
        "metric": initial_metric(d, params.metric),
        "window": MetricWindow.empty(d, params.metric == "dense"),
    }


def initial_metric(dim: int, kind: str) -> FloatArray:
    """The inverse metric before any is estimated: the identity."""
    return frozen_array(np.eye(dim) if kind == "dense" else np.ones(dim))


def check_gradient(name: str, logdensity: float, gradient: object, dim: int) -> FloatArray:
    """The told ``gradient`` as a float64 vector, or ``ValueError``: a log density that
    is not a number or ``-inf``, a gradient that is not of shape ``(dim,)``, or one that
    is not finite where the log density is."""
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    try:
        g = np.asarray(gradient, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: the gradient must be a vector of {dim} numbers") from exc
    if g.shape != (dim,):
        raise ValueError(
            f"{name}: the gradient must have {dim} values, shape ({dim},); the told one "
            f"has shape {g.shape}"
        )
    if logdensity != -math.inf and not np.isfinite(g).all():
        bad = int(np.flatnonzero(~np.isfinite(g))[0])
        raise ValueError(
            f"{name}: the gradient is not finite (coordinate {bad} is {g[bad]!r}) where "
            "the log density is"
        )
    return g


def tell_initial_gradient(
    state: Any, params: Any, logdensity: float, gradient: FloatArray, **restart: Any
) -> tuple[Any, StepInfo]:
    """The initial point's tell for a gradient sampler: a finite log density sets the
    log density and the gradient (and, for a new chain, the first step size unless
    given; a chain given a new initial point later keeps its adapted one); ``-inf``
    leaves the chain as it was, waiting for a new initial point. ``restart``: the
    sampler's fields of a trajectory in progress, as at a transition's start."""
    if logdensity == -math.inf:
        return state, StepInfo(state.iteration, "outside_support", 0.0, True)
    changes: dict[str, Any] = {}
    if params.step_size is None and state.iteration == 0:
        step_size = initial_step_size(gradient, state.metric)
        changes = {"step_size": step_size, "adapt": DualAveraging.start(step_size)}
    new = state.evolve(
        logdensity=float(logdensity),
        gradient=frozen_array(gradient),
        evaluations=state.evaluations + 1,
        step=0,
        **restart,
        **changes,
    )
    return new, StepInfo(state.iteration, "initialized", 1.0, True)
