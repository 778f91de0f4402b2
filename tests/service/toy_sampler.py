"""A toy sampler, written as CONTRIBUTING's recipe says, for the test that a sampler is
its file and one registry entry: independence Metropolis-Hastings with a fixed Gaussian
proposal ``N(0, scale^2 I)``, exact for any target whose tails that proposal covers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

NAME = "toy-independence"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of the toy independence sampler.

    Attributes
    ----------
    scale
        Standard deviation per coordinate of the proposal (default 2).
    """

    dim: int
    warmup: int
    scale: float = 2.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise OptionError("scale", "must be positive")


@register("toy-independence.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A chain of the toy sampler: the fields every chain has, nothing more."""


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    return State(**new_chain_fields(position, seed=seed, chain=chain))


def ask(state: State, params: Params) -> Proposal:
    return metropolis_ask(state, params, _propose)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    return metropolis_tell(state, params, proposal, logdensity, _adapt)


def _propose(state: State, params: Params, rng: np.random.Generator) -> tuple[FloatArray, float]:
    new = params.scale * rng.standard_normal(params.dim)
    # log q(x) - log q(x*): the proposal does not depend on the current point.
    old = state.position
    return new, 0.5 * (float(new @ new) - float(old @ old)) / params.scale**2


def _adapt(
    state: State, new: State, params: Params, proposal: Proposal, info: StepInfo, u_adapt: float
) -> State:
    return new


def chain_floats(dim: int, params: Params) -> int:
    return 4 * dim


SAMPLER: Sampler[State, Params] = Sampler(
    name=NAME,
    Params=Params,
    State=State,
    make_params=make_params,
    init=init,
    ask=ask,
    tell=tell,
    chain_floats=chain_floats,
    metropolis_adapt=_adapt,
)
