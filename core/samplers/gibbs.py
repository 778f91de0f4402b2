"""Metropolis-within-Gibbs over blocks of coordinates, some drawn by the client from
their full conditionals.

The coordinates ``0..dim-1`` are partitioned into blocks (the ``blocks`` option, in
order). One transition is one sweep: each block in turn is updated ``speed`` times
(Cobaya's oversampling of fast blocks), and the draw is the chain's state after the
sweep. Each update is one evaluation, a ``step`` of the transition, handed out after the
one before it is told:

* a **Metropolis-Hastings block** (``conditional: false``) proposes
  ``x*_b = x_b + L_b z`` on the block's coordinates only, the others kept, with
  ``z ~ N(0, I)`` from the step's proposal stream and ``L_b`` the Cholesky factor of
  ``lambda_b * (2.38^2 / d_b) * (Sigma_bb + eps * sigma_0^2 I)``: ``Sigma_bb`` is the
  block's part of the covariance of the chain's states in warm-up, estimated as
  adaptive Metropolis does (:mod:`core.samplers.am`: Welford's running moments in
  windows of doubling length, ``sigma_0^2 I`` until ``adapt_start`` states are in),
  and ``lambda_b`` the block's own global scale, adapted by Robbins-Monro toward an
  acceptance of 0.234 (0.44 for a block of one coordinate: Roberts and Rosenthal
  2001). The proposal is symmetric, and the point is accepted with the Metropolis
  ratio of the told (full) log density to the current one.
* a **conditional block** (``conditional: true``) is drawn by the client from its full
  conditional ``p(x_b | x_-b)`` (kind ``"conditional"``, at the chain's current point):
  the client tells the drawn values and the log density at the point they make, which
  the next Metropolis-Hastings block's ratio needs. The chain always moves there (a
  Gibbs step is a Metropolis-Hastings step accepted with probability 1).

Every update leaves the target invariant, so a sweep does. Adaptation (the covariance
estimate and the scales) runs during warm-up only and is frozen after it: the chain
after warm-up is an ordinary Markov chain, and its draws are exact.

Without ``blocks``, each coordinate is a block of its own, updated by
Metropolis-Hastings: componentwise adaptive Metropolis (Haario, Saksman and Tamminen
2005), which works on any target; one block of every coordinate would be adaptive
Metropolis itself (``am``), with one evaluation per transition.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import metropolis_accept, tell_initial
from kameleon.core.interface.sampler import Evaluation, OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import exp1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import matvec
from kameleon.core.numerics.rng import Stream, generator, substream
from kameleon.core.tuning.adaptation import Welford, learning_rate, robbins_monro, usable_covariance
from kameleon.core.tuning.windows import window_ends

__all__ = [
    "NAME",
    "SAMPLER",
    "Block",
    "Params",
    "State",
    "ask",
    "chain_floats",
    "conditional_indices",
    "init",
    "make_params",
    "schedule",
    "tell",
    "tell_draw",
    "told_record",
]

NAME = "gibbs"


@dataclass(frozen=True, slots=True)
class Block:
    """One block of coordinates.

    Attributes
    ----------
    indices
        The block's coordinates (from 0, at least one, without repeats), in the order in
        which a conditional block's draw is told.
    speed
        Updates of the block per sweep, an integer from 1 to 10000 (default 1): give a
        block whose updates are cheap, or that mixes slowly, more.
    conditional
        True: the client draws the block from its full conditional (kind
        `conditional`); false (default): the sampler updates it by adaptive
        Metropolis-Hastings.
    """

    indices: tuple[int, ...]
    speed: int = 1
    conditional: bool = False

    def __post_init__(self) -> None:
        if not self.indices:
            raise OptionError("indices", "must name at least one coordinate")
        if len(set(self.indices)) != len(self.indices):
            raise OptionError("indices", "names a coordinate twice")
        if not 1 <= self.speed <= 10_000:
            raise OptionError("speed", "must be an integer in [1, 10000]")


@dataclass(frozen=True, slots=True)
class Params:
    """Options of Metropolis-within-Gibbs over blocks.

    Attributes
    ----------
    blocks
        The blocks, each `{"indices": [...], "speed": 1, "conditional": false}`, updated
        in this order in each sweep; together they hold each coordinate `0..dim-1`
        exactly once. Default: one block per coordinate, each updated by adaptive
        Metropolis-Hastings (componentwise adaptive Metropolis, which needs nothing of
        the target; a single block of every coordinate would be `am`).
    initial_scale
        `sigma_0`: standard deviation per coordinate of the initial isotropic covariance
        of each block's proposal (default 1).
    adapt_start
        Chain states in the covariance estimate before it replaces the initial one
        (default `max(50, 4 * d_max)`, with `d_max` the largest Metropolis-Hastings
        block; at least 2).
    nugget
        `eps`, relative to `sigma_0^2`, added to each block's covariance (default 1e-6;
        positive).
    adapt_scale
        Adapt each block's scale toward `target_acceptance` in warm-up (default true).
    target_acceptance
        Target of the scale adaptation; default 0.234 for a block of several coordinates
        and 0.44 for a block of one.
    windows
        Estimate the covariance in warm-up windows of doubling length, each starting
        from the previous one's estimate with the scales back at 1, as `am` does
        (default true).
    """

    dim: int
    warmup: int
    blocks: tuple[Block, ...] | None = None
    initial_scale: float = 1.0
    adapt_start: int | None = None
    nugget: float = 1e-6
    adapt_scale: bool = True
    target_acceptance: float | None = None
    windows: bool = True

    def __post_init__(self) -> None:
        if self.blocks is not None:
            _check_partition(self.blocks, self.dim)
        if not self.initial_scale > 0:
            raise OptionError("initial_scale", "must be positive")
        if self.adapt_start is not None and self.adapt_start < 2:
            raise OptionError("adapt_start", "must be at least 2")
        if not self.nugget > 0:
            raise OptionError("nugget", "must be positive")
        if self.target_acceptance is not None and not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")

    @property
    def the_blocks(self) -> tuple[Block, ...]:
        """The blocks, the default's when none are given."""
        return _blocks(self)

    @property
    def start(self) -> int:
        if self.adapt_start is not None:
            return self.adapt_start
        sizes = [len(b.indices) for b in self.the_blocks if not b.conditional]
        return max(50, 4 * max(sizes, default=1))


def _check_partition(blocks: tuple[Block, ...], dim: int) -> None:
    """:class:`OptionError` naming ``blocks.i.indices`` (or ``blocks``) unless the blocks
    hold each coordinate ``0..dim-1`` exactly once."""
    if not blocks:
        raise OptionError("blocks", "must hold at least one block")
    seen: dict[int, int] = {}
    for i, block in enumerate(blocks):
        for j, k in enumerate(block.indices):
            if not 0 <= k < dim:
                raise OptionError(
                    f"blocks.{i}.indices.{j}", f"coordinate {k} is out of range 0..{dim - 1}"
                )
            if k in seen:
                raise OptionError(
                    f"blocks.{i}.indices.{j}", f"coordinate {k} is in block {seen[k]} too"
                )
            seen[k] = i
    missing = sorted(set(range(dim)) - set(seen))
    if missing:
        raise OptionError(
            "blocks", f"coordinate {missing[0]} is in no block: the blocks must hold 0..{dim - 1}"
        )


@functools.lru_cache(maxsize=256)
def _blocks(params: Params) -> tuple[Block, ...]:
    if params.blocks is not None:
        return params.blocks
    return tuple(Block((k,)) for k in range(params.dim))


@functools.lru_cache(maxsize=256)
def schedule(params: Params) -> tuple[int, ...]:
    """The block updated at each step of a sweep: each block in order, ``speed`` times."""
    return tuple(b for b, block in enumerate(_blocks(params)) for _ in range(block.speed))


@functools.lru_cache(maxsize=256)
def _draw_offsets(params: Params) -> tuple[tuple[int, ...], int]:
    """Where each step's told draw is kept in a record row (-1: a step without one), and
    the row's length."""
    blocks = _blocks(params)
    offsets, at = [], 0
    for b in schedule(params):
        if blocks[b].conditional:
            offsets.append(at)
            at += len(blocks[b].indices)
        else:
            offsets.append(-1)
    return tuple(offsets), at


def pseudo_marginal_refusal(params: Params) -> str | None:
    """With a conditional block, why an unbiased estimate of the density will not do;
    with Metropolis-Hastings blocks only, ``None``: each block update is then a
    pseudo-marginal step that keeps the current point's estimate (see ``Sampler``)."""
    if not any(block.conditional for block in params.blocks or ()):
        return None
    return (
        "with conditional blocks takes draws from exact full conditionals, which an "
        "unbiased estimate of the density does not give: pseudo_marginal needs every "
        "block updated by Metropolis-Hastings"
    )


def conditional_indices(params: Params, step: int) -> tuple[int, ...] | None:
    """The coordinates the evaluation at ``step`` of a sweep asks the client to draw,
    ``None`` for a Metropolis-Hastings update (or a step beyond the sweep)."""
    steps = schedule(params)
    if not 0 <= step < len(steps):
        return None
    block = _blocks(params)[steps[step]]
    return block.indices if block.conditional else None


def _target(params: Params, size: int) -> float:
    if params.target_acceptance is not None:
        return params.target_acceptance
    return 0.44 if size == 1 else 0.234


@register("gibbs.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A Metropolis-within-Gibbs chain.

    Attributes
    ----------
    step
        Evaluations told in the current sweep (the next ask's ``Proposal.step``).
    evaluations
        Every evaluation told, from the initial point that set the chain's state on.
    moved
        Whether the current sweep has moved the chain so far.
    log_lambdas
        Log of each block's scale (one per block; unused for a conditional block).
    moments
        Running mean and covariance of the chain's states in the current warm-up window
        (cold: frozen after warm-up).
    window_covariance
        The previous window's covariance estimate; ``None`` before the first ends.
    told_values, told_draws
        The values and draws told for each step of the last sweep done (row 0) and of
        the current one (row 1), NaN where none was told: a retried result is compared
        with them.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("moments", "window_covariance")

    step: int
    evaluations: int
    moved: bool
    log_lambdas: FloatArray
    moments: Welford
    window_covariance: FloatArray | None
    told_values: FloatArray
    told_draws: FloatArray


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    steps = len(schedule(params))
    _, draws = _draw_offsets(params)
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        step=0,
        evaluations=0,
        moved=False,
        log_lambdas=frozen_array(np.zeros(len(_blocks(params)))),
        moments=Welford.empty(params.dim),
        window_covariance=None,
        told_values=frozen_array(np.full((2, steps), math.nan)),
        told_draws=frozen_array(np.full((2, draws), math.nan)),
    )


def _block_factor(state: State, params: Params, b: int) -> FloatArray:
    """The Cholesky factor of block ``b``'s proposal covariance (module docstring)."""
    idx = np.array(_blocks(params)[b].indices)
    size = idx.size
    variance_0 = params.initial_scale * params.initial_scale
    sigma: FloatArray | None = None
    if state.moments.count >= params.start:  # the block's part only: O(d_block^2)
        running = state.moments.m2[np.ix_(idx, idx)] / (state.moments.count - 1)
        if usable_covariance(running):
            sigma = 0.5 * (running + running.T)
    if sigma is None:
        if state.window_covariance is not None:
            sigma = np.array(state.window_covariance[np.ix_(idx, idx)])
        else:
            sigma = variance_0 * np.eye(size)
    sigma = sigma + params.nugget * variance_0 * np.eye(size)
    cov = exp1(float(state.log_lambdas[b])) * (2.38 * 2.38 / size) * sigma
    try:
        factor: FloatArray = jittered_cholesky(cov)
        return factor
    except np.linalg.LinAlgError:  # an estimate that rounding left far from definite
        scale = math.sqrt(exp1(float(state.log_lambdas[b])) * 2.38 * 2.38 / size * variance_0)
        fallback: FloatArray = scale * np.eye(size)
        return fallback


def ask(state: State, params: Params) -> Proposal:
    """The initial point; then the current sweep's next update: a Metropolis-Hastings
    proposal on one block (kind ``"proposal"``), or the current point for the client to
    draw a conditional block at (kind ``"conditional"``, with ``block`` and ``indices``)."""
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    b = schedule(params)[state.step]
    block = _blocks(params)[b]
    if block.conditional:
        return Proposal(
            t, "conditional", state.position, step=state.step, block=b, indices=block.indices
        )
    rng = generator(state.seed, state.chain, t, substream(Stream.PROPOSE, state.step))
    z = rng.standard_normal(len(block.indices))
    point = np.array(state.position)
    with np.errstate(over="ignore", invalid="ignore"):
        point[list(block.indices)] += matvec(_block_factor(state, params, b), z)
    if not np.isfinite(
        point
    ).all():  # overflowed: propose staying put, as core.interface.sampler does
        return Proposal(t, "proposal", state.position, step=state.step)
    return Proposal(t, "proposal", frozen_array(point), step=state.step)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    """:func:`tell_draw` without a draw (a ``ValueError`` at a conditional proposal)."""
    return tell_draw(state, params, proposal, logdensity, None)


def _checked_draw(block: Block, draw: FloatArray | None) -> FloatArray:
    if draw is None:
        raise ValueError("a conditional proposal needs the client's draw of its block")
    values = np.asarray(draw, dtype=np.float64)
    if values.shape != (len(block.indices),):
        raise ValueError(
            f"the draw must have {len(block.indices)} values, not shape {values.shape}"
        )
    if not np.isfinite(values).all():
        raise ValueError("the draw must be finite")
    return values


def tell_draw(
    state: State, params: Params, proposal: Proposal, logdensity: float, draw: FloatArray | None
) -> tuple[State, StepInfo]:
    """Everything after the evaluation of ``proposal``: the told log density, and for a
    conditional proposal the client's draw of its block (``None`` otherwise)."""
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    if proposal.kind == "init":
        if state.logdensity is not None or proposal.iteration != state.iteration:
            raise ValueError("proposal does not belong to this state")
        if draw is not None:
            raise ValueError("an initial point takes no draw")
        new, info = tell_initial(state, proposal, logdensity)
        if info.outcome != "initialized":
            return new, info
        return new.evolve(evaluations=state.evaluations + 1), info
    t = state.iteration + 1
    steps = schedule(params)
    if state.logdensity is None or (proposal.iteration, proposal.step) != (t, state.step):
        raise ValueError("proposal does not belong to this state")
    b = steps[state.step]
    block = _blocks(params)[b]
    if proposal.kind != ("conditional" if block.conditional else "proposal"):
        raise ValueError("proposal does not belong to this state")
    warm = t <= params.warmup
    values = np.array(state.told_values)
    draws = np.array(state.told_draws)
    values[1, state.step] = logdensity
    log_lambdas = state.log_lambdas
    if block.conditional:
        drawn = _checked_draw(block, draw)
        if not logdensity > -math.inf:
            raise ValueError("the log density at the drawn point must be finite")
        position = np.array(state.position)
        position[list(block.indices)] = drawn
        offset = _draw_offsets(params)[0][state.step]
        draws[1, offset : offset + drawn.size] = drawn
        moved = state.moved or not np.array_equal(position, state.position)
        new_position, new_logdensity, prob = frozen_array(position), float(logdensity), 1.0
    else:
        if draw is not None:
            raise ValueError("a Metropolis-Hastings update takes no draw")
        u = float(
            generator(state.seed, state.chain, t, substream(Stream.ACCEPT, state.step)).random()
        )
        accepted, prob = metropolis_accept(logdensity, state.logdensity, 0.0, u)
        moved = state.moved or (accepted and not np.array_equal(proposal.position, state.position))
        new_position = proposal.position if accepted else state.position
        new_logdensity = float(logdensity) if accepted else state.logdensity
        if warm and params.adapt_scale:
            start = max((e for e in _window_ends(params) if e < t), default=0)
            lambdas = np.array(log_lambdas)
            lambdas[b] = robbins_monro(
                float(lambdas[b]),
                prob,
                _target(params, len(block.indices)),
                learning_rate(t, start=start),
            )
            log_lambdas = frozen_array(lambdas)
    common = {
        "position": new_position,
        "logdensity": new_logdensity,
        "evaluations": state.evaluations + 1,
        "log_lambdas": log_lambdas,
    }
    if state.step + 1 < len(steps):  # the sweep goes on
        new = state.evolve(
            **common,
            step=state.step + 1,
            moved=moved,
            told_values=frozen_array(values),
            told_draws=frozen_array(draws),
        )
        return new, StepInfo(t, "step", prob, warm)
    # The sweep's last update: the draw.
    values[0], values[1] = values[1], math.nan
    draws[0], draws[1] = draws[1], math.nan
    moments, window_covariance = state.moments, state.window_covariance
    if warm:
        moments = moments.update(np.asarray(new_position))
        if t in _window_ends(params) and moments.count >= 2:
            estimate = moments.covariance()
            if usable_covariance(estimate) and np.all(np.diagonal(estimate) > 0):
                window_covariance = frozen_array(0.5 * (estimate + estimate.T))
                log_lambdas = frozen_array(np.zeros_like(log_lambdas))
                common["log_lambdas"] = log_lambdas
            moments = Welford.empty(params.dim)
    new = state.evolve(
        **common,
        iteration=t,
        accepted=state.accepted + moved,
        step=0,
        moved=False,
        moments=moments,
        window_covariance=window_covariance,
        told_values=frozen_array(values),
        told_draws=frozen_array(draws),
    )
    return new, StepInfo(t, "accepted" if moved else "rejected", prob, warm)


def _window_ends(params: Params) -> tuple[int, ...]:
    """The warm-up iterations after which a new window starts (as ``am``'s)."""
    if not params.windows:
        return ()
    return window_ends(params.warmup, params.dim, minimum=params.start)[:-1]


def told_record(
    state: State, params: Params, iteration: int, step: int
) -> tuple[float, FloatArray | None] | None:
    """The value and draw told for the evaluation at ``(iteration, step)``, if the
    chain still has them: those of the current sweep and of the one before it."""
    if state.logdensity is None or iteration < 1:
        return None
    if iteration == state.iteration + 1 and step < state.step:
        row = 1
    elif iteration == state.iteration:
        row = 0
    else:
        return None
    steps = schedule(params)
    if not 0 <= step < len(steps):
        return None
    value = float(state.told_values[row, step])
    if math.isnan(value):
        return None
    offset = _draw_offsets(params)[0][step]
    if offset < 0:
        return value, None
    size = len(_blocks(params)[steps[step]].indices)
    return value, frozen_array(state.told_draws[row, offset : offset + size])


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    Welford mean and covariance, the window's covariance, a block's covariance and
    factor, the records of two sweeps' told values and draws, and the scales."""
    steps = len(schedule(params))
    _, draws = _draw_offsets(params)
    return 4 * dim * dim + 4 * dim + 2 * steps + 2 * draws + len(_blocks(params)) + 40


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
    evaluation=Evaluation(draw=True),
    acceptance_checked=False,
    multistep=True,
    tell_draw=tell_draw,
    conditional_indices=conditional_indices,
    told_record=told_record,
    pseudo_marginal_refusal=pseudo_marginal_refusal,
)
