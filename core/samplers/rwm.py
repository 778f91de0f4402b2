"""Random-walk Metropolis.

Proposal ``x* = x + s * N(0, I)``, symmetric, accepted with the Metropolis ratio. The
scale ``s`` starts at ``2.38 / sqrt(d)`` (Gelman, Roberts and Gilks 1996) and, during
adaptation, follows a Robbins-Monro recursion on ``log s`` toward a target acceptance
rate (0.234 by default) using the clipped acceptance probability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Proposal,
    StepInfo,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import metropolis_ask, metropolis_tell
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.tuning.adaptation import adapt_probability, learning_rate, robbins_monro

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "chain_floats",
    "init",
    "make_params",
    "tell",
]

NAME = "rwm"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of random-walk Metropolis.

    Attributes
    ----------
    scale
        Initial proposal standard deviation per coordinate; default ``2.38 / sqrt(dim)``.
    adapt_scale
        Adapt ``scale`` toward ``target_acceptance`` (default true).
    target_acceptance
        Target of the scale adaptation (default 0.234).
    adaptation
        ``"warmup"`` (default): adapt during warm-up only; ``"diminishing"``: keep
        adapting with vanishing probability.
    """

    dim: int
    warmup: int
    scale: float | None = None
    adapt_scale: bool = True
    target_acceptance: float = 0.234
    adaptation: Literal["warmup", "diminishing"] = "warmup"

    def __post_init__(self) -> None:
        if self.scale is not None and not self.scale > 0:
            raise OptionError("scale", "must be positive")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")

    @property
    def initial_scale(self) -> float:
        return self.scale if self.scale is not None else 2.38 / math.sqrt(self.dim)


@register("rwm.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A random-walk Metropolis chain; ``log_scale`` is ``log s``."""

    log_scale: float


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        log_scale=log1(params.initial_scale),
    )


def ask(state: State, params: Params) -> Proposal:
    return metropolis_ask(state, params, _propose)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    return metropolis_tell(state, params, proposal, logdensity, _adapt)


def _propose(state: State, params: Params, rng: np.random.Generator) -> tuple[FloatArray, float]:
    return state.position + exp1(state.log_scale) * rng.standard_normal(params.dim), 0.0


def _adapt(
    state: State, new: State, params: Params, proposal: Proposal, info: StepInfo, u_adapt: float
) -> State:
    t = info.iteration
    if params.adapt_scale and u_adapt < adapt_probability(
        t, warmup=params.warmup, mode=params.adaptation
    ):
        log_scale = robbins_monro(
            state.log_scale, info.acceptance_probability, params.target_acceptance, learning_rate(t)
        )
        new = new.evolve(log_scale=log_scale)
    return new


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`)."""
    return 8 * dim


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
    # What tell hands to metropolis_tell: core.running.batch.tell_many steps many chains at once.
    metropolis_adapt=_adapt,
)
