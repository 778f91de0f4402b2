"""The affine-invariant ensemble sampler (Goodman and Weare 2010; emcee, Foreman-Mackey
et al. 2013), one walker's update per transition.

A chain holds an ensemble of ``W`` walkers (``W`` even), split in two halves: walkers
``0 .. W/2 - 1`` and ``W/2 .. W - 1``. As emcee does, a half-step updates each walker of
one half with a move built from the walkers of the other half (the complementary half),
which does not change during that half-step: only the active half is updated. Here each
walker's update is one transition (one evaluation): iteration ``t`` updates walker
``t mod W``, so the first half is updated walker by walker, then the second, and one
sweep of ``W`` transitions moves every walker once. The complementary half needs no copy
of its own in the state: during a half-step no transition writes to it.

Moves, chosen per transition with probability ``de_probability`` for the second:

* the stretch move: a walker ``x_j`` of the complementary half drawn uniformly,
  ``z`` from ``g(z) ∝ 1 / sqrt(z)`` on ``[1/a, a]`` (``a`` is ``stretch``), the proposal
  ``y = x_j + z (x - x_j)``, accepted with probability
  ``min(1, z^(d-1) pi(y) / pi(x))``: the factor ``z^(d-1)`` is the proposal's
  ``log_correction``, ``(d - 1) log z``;
* the differential-evolution move (ter Braak 2006; emcee's ``DEMove``): two distinct
  walkers ``x_j``, ``x_l`` of the complementary half, ``y = x + gamma (x_j - x_l) + e``
  with ``gamma = 2.38 / sqrt(2 d)`` and ``e ~ N(0, sigma^2 I)``, ``sigma = 1e-5``;
  symmetric (the pair drawn in the other order undoes it), so no correction.

Start: the chain's initial point is walker 0. When it is told, the other walkers are
placed at ``x_0 + initial_spread * N(0, I)`` (a small Gaussian ball, as emcee users
start their walkers), and iterations ``1 .. W - 1`` evaluate them one by one: a finite
value sets that walker (outcome ``accepted``), ``-inf`` puts it at the initial point
instead (outcome ``rejected``). Moves begin at iteration ``W``, with walker 0.

The chain's draw after a transition is the updated walker's position and its log
density: the draws are the walkers' positions interleaved, walker ``t mod W`` at
iteration ``t``. The ensemble needs no adaptation: warm-up is burn-in.

Halves: fixed (``split: "fixed"``, the default) or drawn anew at every sweep
(``"random"``, emcee's default ``randomize_split``). With a random split, sweep ``n``
(iterations ``n W .. n W + W - 1``, from the first sweep of moves) draws a permutation
``pi_n`` of the walkers from its own stream (``Stream.SPLIT``, counter ``n``); slot
``s = t mod W`` updates walker ``pi_n(s)``, against the walkers of the other half of
the slots. The draw of iteration ``t`` is still walker ``t mod W``'s position (every
walker is updated once per sweep, so each walker is recorded once per sweep, at a fixed
time); its told value and acceptance are those of the transition, which moved walker
``pi_n(s)``. A split chosen independently of the walkers' positions leaves the
ensemble's target invariant, whichever it is.

Pseudo-marginal: each walker's told estimate is kept with it, as a Metropolis-Hastings
chain keeps its current state's, and never asked for again; the move of one walker,
given the others' positions, is a Metropolis-Hastings step on the ensemble's extended
target, so the ensemble stays exact with unbiased estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Outcome,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import check_tell, metropolis_accept
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import log1
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "DE_NOISE",
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "ask_ahead",
    "chain_floats",
    "complementary",
    "init",
    "make_params",
    "round_size",
    "split_order",
    "stretch_z",
    "tell",
    "walker_of",
]

NAME = "ensemble"

IntArray = npt.NDArray[np.int64]

#: The standard deviation of the differential-evolution move's noise (emcee's ``sigma``).
DE_NOISE = 1e-5


@dataclass(frozen=True, slots=True)
class Params:
    """Options of the ensemble sampler.

    Attributes
    ----------
    walkers
        ``W``, the walkers of each chain's ensemble: even, at least 4 and more than
        ``dim`` (fewer walkers span a subspace that the stretch move never leaves);
        default ``max(8, 2 * dim)``, emcee's advice of at least twice the dimension.
    stretch
        ``a`` of the stretch move, above 1 (default 2, Goodman and Weare's and emcee's).
    de_probability
        The probability that a transition makes the differential-evolution move
        instead of the stretch move, in ``[0, 1]`` (default 0: emcee's default moves,
        exactly affine invariant; the move's small noise is not).
    initial_spread
        The standard deviation, per coordinate, of the Gaussian ball around the
        initial point where the other walkers start (default 0.1, positive). The
        ensemble widens itself to the target's scale during warm-up.
    split
        How the walkers are split in the two halves: ``"fixed"`` (default; walkers
        ``0 .. W/2 - 1`` and the rest) or ``"random"``, drawn anew at every sweep
        (emcee's ``randomize_split``, its default).
    """

    dim: int
    warmup: int
    walkers: int | None = None
    stretch: float = 2.0
    de_probability: float = 0.0
    initial_spread: float = 0.1
    split: Literal["fixed", "random"] = "fixed"

    def __post_init__(self) -> None:
        if self.walkers is not None:
            if self.walkers < 4 or self.walkers % 2:
                raise OptionError("walkers", "must be even and at least 4")
            if self.walkers <= self.dim:
                raise OptionError(
                    "walkers", f"must be more than dim ({self.dim}): fewer span a subspace"
                )
        if not (self.stretch > 1 and math.isfinite(self.stretch)):
            raise OptionError("stretch", "must be a finite number above 1")
        if not 0 <= self.de_probability <= 1:
            raise OptionError("de_probability", "must be in [0, 1]")
        if not (self.initial_spread > 0 and math.isfinite(self.initial_spread)):
            raise OptionError("initial_spread", "must be positive and finite")
        if self.split not in ("fixed", "random"):
            raise OptionError("split", 'must be "fixed" or "random"')

    @property
    def size(self) -> int:
        """``W``, the walkers of the ensemble."""
        return self.walkers if self.walkers is not None else ensemble_size(self.dim)


def ensemble_size(dim: int) -> int:
    """The default number of walkers in ``dim`` dimensions: ``max(8, 2 dim)``."""
    return max(8, 2 * dim)


@register("ensemble.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """An ensemble of walkers.

    Attributes
    ----------
    walkers
        The walkers' positions, shape ``(W, dim)``; before the initial point is told,
        every row is the initial point.
    walker_logdensities
        Their told log densities, shape ``(W,)``; NaN for a walker not evaluated yet.
    """

    walkers: FloatArray
    walker_logdensities: FloatArray


make_params = params_parser(Params)


def walker_of(iteration: int, walkers: int) -> int:
    """The walker that ``iteration`` updates (0: the initial point's)."""
    return iteration % walkers


def complementary(walker: int, walkers: int) -> slice:
    """The walkers of the half that ``walker``'s moves are built from."""
    half = walkers // 2
    return slice(half, walkers) if walker < half else slice(0, half)


def split_order(state: ChainState, params: Params, iteration: int) -> IntArray | None:
    """The walkers in the order the slots of ``iteration``'s sweep update them
    (``None``: in their own order, a fixed split or a sweep that places walkers)."""
    w = params.size
    if params.split == "fixed" or iteration < w:
        return None
    rng = generator(state.seed, state.chain, iteration // w, Stream.SPLIT)
    order: IntArray = rng.permutation(w)
    return order


def _moved(state: State, params: Params, iteration: int) -> tuple[int, slice | IntArray]:
    """The walker that ``iteration`` moves, and the walkers its move is built from."""
    w = params.size
    slot = walker_of(iteration, w)
    order = split_order(state, params, iteration)
    if order is None:
        return slot, complementary(slot, w)
    return int(order[slot]), order[complementary(slot, w)]


def stretch_z(u: float, a: float) -> float:
    """``z`` of the stretch move from a uniform ``u``: the inverse of the CDF of
    ``g(z) ∝ 1 / sqrt(z)`` on ``[1/a, a]``, ``((a - 1) u + 1)^2 / a``."""
    root = (a - 1.0) * u + 1.0
    return root * root / a


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    fields = new_chain_fields(position, seed=seed, chain=chain)
    w = params.size
    return State(
        **fields,
        walkers=frozen_array(np.broadcast_to(fields["position"], (w, params.dim))),
        walker_logdensities=frozen_array(np.full(w, math.nan)),
    )


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    w = params.size
    if t < w:  # a walker's starting point, placed when the initial point was told
        return Proposal(t, "proposal", state.walkers[walker_of(t, w)])
    k, other = _moved(state, params, t)
    x = state.walkers[k]
    others = state.walkers[other]
    rng = generator(state.seed, state.chain, t, Stream.PROPOSE)
    if params.de_probability and (
        float(generator(state.seed, state.chain, t, Stream.MIX).random()) < params.de_probability
    ):
        j, m = rng.choice(len(others), size=2, replace=False)
        gamma = 2.38 / math.sqrt(2.0 * params.dim)
        y = x + gamma * (others[j] - others[m]) + DE_NOISE * rng.standard_normal(params.dim)
        correction = 0.0
    else:
        j = int(rng.integers(len(others)))
        z = stretch_z(float(rng.random()), params.stretch)
        y = others[j] + z * (x - others[j])
        correction = (params.dim - 1) * log1(z)
    point = frozen_array(y)
    if not np.isfinite(point).all():  # the arithmetic overflowed: propose staying put
        return Proposal(t, "proposal", x, 0.0)
    return Proposal(t, "proposal", point, correction)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    check_tell(state, proposal, logdensity)
    if proposal.kind == "init":
        return _tell_initial(state, params, logdensity)
    t = proposal.iteration
    w = params.size
    k = walker_of(t, w) if t < w else _moved(state, params, t)[0]
    warm = t <= params.warmup
    outcome: Outcome
    if t < w:  # a walker's starting point
        finite = logdensity != -math.inf
        position = proposal.position if finite else state.walkers[0]
        value = float(logdensity) if finite else float(state.walker_logdensities[0])
        outcome, prob = ("accepted", 1.0) if finite else ("rejected", 0.0)
        accepted = bool(finite)
    else:
        u = float(generator(state.seed, state.chain, t, Stream.ACCEPT).random())
        current = float(state.walker_logdensities[k])
        accepted, prob = metropolis_accept(logdensity, current, proposal.log_correction, u)
        position = proposal.position if accepted else state.walkers[k]
        value = float(logdensity) if accepted else current
        outcome = "accepted" if accepted else "rejected"
    walkers, densities = state.walkers, state.walker_logdensities
    if accepted or t < w:  # a walker outside the support starts at the initial point
        walkers = np.array(walkers)
        walkers[k] = position
        walkers.flags.writeable = False
        densities = np.array(densities)
        densities[k] = value
        densities.flags.writeable = False
    recorded = walker_of(t, w)  # the draw: walker t mod W, whichever walker moved
    if recorded != k:
        position, value = walkers[recorded], float(densities[recorded])
    new: State = state.evolve(
        position=frozen_array(position),
        logdensity=value,
        iteration=t,
        accepted=state.accepted + accepted,
        walkers=walkers,
        walker_logdensities=densities,
    )
    return new, StepInfo(t, outcome, prob, warm)


def round_size(state: State, params: Params) -> int:
    """The rest of the chain's round (:mod:`core.populations.rounds`): the walkers still to be placed
    (each is evaluated where it was put), then the rest of the half-step (each walker
    of the half moves from the other half's positions as they were when it began)."""
    t = state.iteration + 1
    w = params.size
    if t < w:
        return w - t
    half = w // 2
    return half - t % half


def ask_ahead(state: State, params: Params, k: int) -> Proposal:
    """The proposal ``k`` evaluations after the outstanding one, within its round."""
    return ask(state.evolve(iteration=state.iteration + k), params)


def _tell_initial(state: State, params: Params, logdensity: float) -> tuple[State, StepInfo]:
    """The initial point told: walker 0 set, the others placed in a ball around it."""
    if logdensity == -math.inf:
        return state, StepInfo(state.iteration, "outside_support", 0.0, True)
    w = params.size
    ball = generator(state.seed, state.chain, state.epoch, Stream.SETUP).standard_normal(
        (w - 1, params.dim)
    )
    walkers = np.empty((w, params.dim))
    walkers[0] = state.position
    walkers[1:] = state.position + params.initial_spread * ball
    densities = np.full(w, math.nan)
    densities[0] = float(logdensity)
    new: State = state.evolve(
        logdensity=float(logdensity),
        walkers=frozen_array(walkers),
        walker_logdensities=frozen_array(densities),
    )
    return new, StepInfo(state.iteration, "initialized", 1.0, True)


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    walkers and their log densities, twice (the state before and after a tell), and a
    proposal's few vectors."""
    w = params.size
    return 2 * (w * dim + w) + 4 * dim


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
    ensemble_size=lambda params: params.size,
    round_size=round_size,
    ask_ahead=ask_ahead,
)
