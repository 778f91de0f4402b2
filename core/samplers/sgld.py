"""Stochastic-gradient Langevin dynamics (SGLD; Welling and Teh 2011).

For a posterior ``p(theta | x_1..x_N) ∝ p(theta) prod_i p(x_i | theta)``, each transition
asks for the log prior and a minibatch's log likelihood, each with its gradient, at the
chain's current point ``theta`` (kind ``"minibatch"``), the minibatch being ``n`` of
the ``N`` data points drawn without replacement, and moves

    theta' = theta + (eps_t / 2) (grad log p(theta) + (N / n) sum_{i in batch}
             grad log p(x_i | theta)) + sqrt(eps_t) z,        z ~ N(0, I),

with the step ``eps_t = a (b + t)^-gamma`` at transition ``t``. There is no
accept/reject: every transition moves (outcome ``"accepted"``, acceptance probability
1), except at a point whose told log prior is ``-inf`` (outside the support), where the
chain cannot move and the transition is ``"rejected"``.

**SGLD is biased.** Without the Metropolis-Hastings correction, the chain samples an
approximation of the posterior whose error grows with the step size; it shrinks as
``eps_t`` does. Each draw carries the step it was made with (``stats``:
``step_size``), so that its draws can be weighted by ``eps_t``, as Welling and Teh do.

There is no gradient check (``gradient_check`` is not an option of ``sgld``): the told
gradient is a noisy minibatch estimate, and finite differences of noisy estimates say
nothing about it.

The state's ``logdensity`` is the last told estimate of the log posterior,
``log_prior + (N / n) log_likelihood``, at the point the chain was at before its last
move (the point the estimate was told for), not at ``position``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Parts,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.sampler import Evaluation, OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import pow1
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "batch_size",
    "chain_floats",
    "estimate",
    "init",
    "make_params",
    "minibatch",
    "parts_value",
    "step_size",
    "tell",
    "tell_parts",
]

NAME = "sgld"

#: The default minibatch size, when the data has at least this many points.
DEFAULT_BATCH = 100


@dataclass(frozen=True, slots=True)
class Params:
    """Options of SGLD.

    Attributes
    ----------
    data_size
        ``N``, the number of data points (required, at least 1).
    batch_size
        ``n``, the data points in each minibatch, drawn without replacement (1 to
        ``N``; default ``min(N, 100)``).
    step_size
        ``a`` in the step schedule ``eps_t = a (b + t)^-gamma`` (default 1e-4, > 0).
    step_offset
        ``b`` in the step schedule (default 10, >= 0).
    step_decay
        ``gamma`` in the step schedule, in (0.5, 1] (default 0.55).
    """

    dim: int
    warmup: int
    data_size: int = 0
    batch_size: int | None = None
    step_size: float = 1e-4
    step_offset: float = 10.0
    step_decay: float = 0.55

    def __post_init__(self) -> None:
        if self.data_size < 1:
            raise OptionError("data_size", "is required: the number of data points, N >= 1")
        if self.batch_size is not None and not 1 <= self.batch_size <= self.data_size:
            raise OptionError("batch_size", f"must be in 1..data_size ({self.data_size})")
        if not (math.isfinite(self.step_size) and self.step_size > 0):
            raise OptionError("step_size", "must be positive")
        if not (math.isfinite(self.step_offset) and self.step_offset >= 0):
            raise OptionError("step_offset", "must be at least 0")
        if not 0.5 < self.step_decay <= 1:
            raise OptionError("step_decay", "must be in (0.5, 1]")


@register("sgld.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """An SGLD chain: the step size of its last transition (``step_size``)."""

    step_size: float


make_params = params_parser(Params)


def batch_size(params: Params) -> int:
    """``n``: the minibatch size."""
    if params.batch_size is not None:
        return params.batch_size
    return min(params.data_size, DEFAULT_BATCH)


def step_size(params: Params, t: int) -> float:
    """``eps_t = a (b + t)^-gamma``, the step of transition ``t`` (from 1)."""
    return params.step_size * pow1(params.step_offset + t, -params.step_decay)


def minibatch(params: Params, *, seed: int, chain: int, iteration: int) -> tuple[int, ...]:
    """The data points of ``iteration``'s minibatch: ``n`` of ``0..N-1`` without
    replacement, from the iteration's mixture stream (a replay gives the same), sorted."""
    rng = generator(seed, chain, iteration, Stream.MIX)
    picked = rng.choice(params.data_size, size=batch_size(params), replace=False, shuffle=False)
    return tuple(sorted(int(i) for i in picked))


def estimate(params: Params, log_prior: float, log_likelihood: float) -> float:
    """The unbiased estimate of the log posterior from a minibatch,
    ``log_prior + (N / n) log_likelihood``."""
    if log_prior == -math.inf:
        return -math.inf
    scale = params.data_size / batch_size(params)
    return float(log_prior) + scale * float(log_likelihood)


def parts_value(params: Params, parts: Parts) -> float:
    """:func:`estimate` of told parts (the record's ``parts_value``)."""
    return estimate(params, parts.log_prior, parts.log_likelihood)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **new_chain_fields(position, seed=seed, chain=chain), step_size=step_size(params, 1)
    )


def ask(state: State, params: Params) -> Proposal:
    """The current point with the next iteration's minibatch (the initial point with
    iteration 0's, kind ``"init"``)."""
    if state.logdensity is None:
        batch = minibatch(params, seed=state.seed, chain=state.chain, iteration=state.iteration)
        return Proposal(state.iteration, "init", state.position, minibatch=batch)
    t = state.iteration + 1
    batch = minibatch(params, seed=state.seed, chain=state.chain, iteration=t)
    return Proposal(t, "minibatch", state.position, minibatch=batch)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    raise ValueError(
        f"{NAME} needs the log prior and the minibatch's log likelihood, each with its "
        "gradient, at every point"
    )


def _checked(parts: Parts, dim: int) -> tuple[float, float, FloatArray, FloatArray]:
    log_prior, log_likelihood = float(parts.log_prior), float(parts.log_likelihood)
    if math.isnan(log_prior) or log_prior == math.inf:
        raise ValueError("the log prior must be a number or -inf")
    if log_prior == -math.inf:
        return log_prior, log_likelihood, frozen_array(np.zeros(dim)), frozen_array(np.zeros(dim))
    if not math.isfinite(log_likelihood):
        raise ValueError("the log likelihood must be finite where the log prior is")
    grads = []
    for name, values in (
        ("prior gradient", parts.prior_gradient),
        ("likelihood gradient", parts.likelihood_gradient),
    ):
        g = np.asarray(values, dtype=np.float64)
        if g.shape != (dim,):
            raise ValueError(f"the {name} must have {dim} values, not shape {g.shape}")
        if not np.isfinite(g).all():
            raise ValueError(f"the {name} must be finite")
        grads.append(frozen_array(g))
    return log_prior, log_likelihood, grads[0], grads[1]


def tell_parts(
    state: State, params: Params, proposal: Proposal, parts: Parts
) -> tuple[State, StepInfo]:
    """Everything after the evaluation of ``proposal``, with the target's parts."""
    expected = ask(state, params)
    if (proposal.kind, proposal.iteration) != (expected.kind, expected.iteration):
        raise ValueError("proposal does not belong to this state")
    log_prior, log_likelihood, g_prior, g_lik = _checked(parts, params.dim)
    value = estimate(params, log_prior, log_likelihood)
    if proposal.kind == "init":
        if log_prior == -math.inf:
            return state, StepInfo(state.iteration, "outside_support", 0.0, True)
        return state.evolve(logdensity=value), StepInfo(state.iteration, "initialized", 1.0, True)
    t = proposal.iteration
    eps = step_size(params, t)
    warm = t <= params.warmup
    if log_prior == -math.inf:  # outside the support: the chain cannot move
        new = state.evolve(iteration=t, step_size=eps)
        return new, StepInfo(t, "rejected", 0.0, warm)
    z = generator(state.seed, state.chain, t, Stream.PROPOSE).standard_normal(params.dim)
    scale = params.data_size / batch_size(params)
    with np.errstate(over="ignore", invalid="ignore"):
        drift = (0.5 * eps) * (g_prior + scale * g_lik)
        point = frozen_array(state.position + drift + math.sqrt(eps) * z)
    if not np.isfinite(point).all():  # overflowed: stay put, as core.interface.sampler does
        new = state.evolve(logdensity=value, iteration=t, step_size=eps)
        return new, StepInfo(t, "rejected", 0.0, warm)
    new = state.evolve(
        position=point,
        logdensity=value,
        iteration=t,
        accepted=state.accepted + 1,
        step_size=eps,
    )
    return new, StepInfo(t, "accepted", 1.0, warm)


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    position, the two gradients, the noise and the drift's temporaries, the minibatch's
    indices, and about 40 floats' worth of scalars and field names."""
    return 40 + 8 * dim + batch_size(params)


#: The sampler as the registry (:data:`core.SAMPLERS`) knows it.
SAMPLER: Sampler[State, Params] = Sampler(
    name=NAME,
    Params=Params,
    State=State,
    make_params=make_params,
    init=init,
    ask=ask,
    tell=tell,
    chain_floats=chain_floats,
    evaluation=Evaluation(parts=True),
    tell_parts=tell_parts,
    parts_value=parts_value,
    stats=("step_size",),
    acceptance_checked=False,
)
