"""The No-U-Turn sampler (Hoffman and Gelman 2014) as Stan and BlackJAX run it:
multinomial sampling of the trajectory's points, the generalised U-turn criterion
(Betancourt 2017), biased progressive sampling between subtrees, asked and told one
leapfrog point at a time.

A transition from ``x`` draws a momentum ``p ~ N(0, M)`` from the iteration's proposal
stream and one direction per doubling from its mixture stream, then doubles the
trajectory: the subtree of depth ``j`` is ``2^j`` leapfrog steps from the trajectory's
end in the ``j``-th direction. The tree is built iteratively, one leapfrog point per
``ask``/``tell`` (BlackJAX's ``dynamic_iterative_nuts``, NumPyro's iterative U-turn
checkpoints), so the state between two evaluations is bounded: the trajectory's two
ends (position, momentum, gradient, log density), the sum of its momenta, the draw
candidate and the current subtree's, two log sums of weights, and at most
``max_tree_depth`` checkpoints of a momentum and a momentum sum (a subtree of depth
``j`` uses ``j`` of them, and only those are stored; the subtrees whose U-turn a new point
closes are those whose first point is at a checkpoint: leaf ``n`` of a subtree closes
the ``t`` subtrees of sizes ``2, 4, ..., 2^t`` ending at it, ``t`` the trailing ones of
``n``).

Each point is weighted by ``exp(H0 - H)``. Within a subtree the candidate is the new
point with probability its weight over the subtree's (uniform progressive sampling);
a completed subtree's candidate replaces the trajectory's with probability ``min(1,
W_subtree / W_trajectory)`` (biased progressive sampling). The transition ends when a
subtree closes a U-turn (its points are not sampled), a point diverges (``-inf`` or an
energy error above 1000: the subtree is not sampled), the whole trajectory makes a
U-turn, or the tree reaches ``max_tree_depth``.

Every point is handed out as ``"leapfrog"``: which one ends the transition is known
only once it is told. The tell of that point returns ``"accepted"`` when the draw moved
(the candidate is not the starting point) and ``"rejected"`` when the chain stays put,
with Stan's acceptance statistic, the mean of ``min(1, exp(H0 - H))`` over the points
of the tree, as ``acceptance_probability``; the step size adapts to it. A next point
that overflows is never handed out: ``ask`` hands out the current position in its
place and its tell ends the transition as a divergence.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core.gradients.chain import (
    WARMUP_COLD_FIELDS,
    check_gradient,
    check_gradient_options,
    new_gradient_fields,
    tell_initial_gradient,
)
from kameleon.core.gradients.check import Check, check_ask, check_tell
from kameleon.core.gradients.hamiltonian import (
    DIVERGENCE,
    draw_momentum,
    half_momentum,
    is_turning,
    kinetic_energies,
    kinetic_energy,
    leapfrog_momenta,
    leapfrog_momentum,
    leapfrog_position,
    leapfrog_positions,
    log_add_exp,
    turnings,
)
from kameleon.core.gradients.warmup import DualAveraging, MetricWindow, warmup_changes
from kameleon.core.interface.chain import ChainState, FloatArray, Proposal, StepInfo, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.interface.sampler import Evaluation, OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.rng import Stream, generator, substream

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "Point",
    "State",
    "Trajectory",
    "ask",
    "ask_many",
    "chain_floats",
    "checkpoint_range",
    "init",
    "make_params",
    "tell",
    "tell_gradient",
    "tell_gradient_many",
]

NAME = "nuts"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of the No-U-Turn sampler.

    Attributes
    ----------
    max_tree_depth
        Most doublings of a trajectory: at most ``2^max_tree_depth - 1`` leapfrog steps
        per transition (default 10).
    step_size
        Initial step size; default from the gradient at the initial point.
    target_acceptance
        Target of the step-size adaptation (default 0.8).
    adapt_step_size
        Adapt the step size during warm-up (default true).
    adapt_metric
        Estimate the inverse metric during warm-up (default true).
    metric
        ``"diag"`` (default), ``"dense"`` or ``"unit"`` (the identity, never adapted).
    gradient_check
        The first this many chains check the told gradient at their initial point
        against finite differences (default 1).
    """

    dim: int
    warmup: int
    max_tree_depth: int = 10
    step_size: float | None = None
    target_acceptance: float = 0.8
    adapt_step_size: bool = True
    adapt_metric: bool = True
    metric: Literal["diag", "dense", "unit"] = "diag"
    gradient_check: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.max_tree_depth <= 30:
            raise OptionError("max_tree_depth", "must be in [1, 30]")
        check_gradient_options(self)


@register("nuts.Point")
@dataclass(frozen=True, slots=True)
class Point:
    """A point of a trajectory: position, momentum, the log density and its gradient
    there, and the Hamiltonian ``energy``."""

    position: FloatArray
    momentum: FloatArray
    gradient: FloatArray
    logdensity: float
    energy: float


@register("nuts.Trajectory")
@dataclass(frozen=True, slots=True)
class Trajectory:
    """A transition's tree in progress.

    Attributes
    ----------
    left, right
        The trajectory's ends (one of them the current subtree's last point).
    sample
        The trajectory's draw candidate; ``moved``: it is not the starting point.
    subtree_sample
        The current subtree's candidate.
    momentum_sum
        The momenta of every point of the trajectory, added.
    checkpoint_momentum, checkpoint_sum, checkpoint_previous
        Shape ``(k, d)``, ``k`` at most ``max_tree_depth``: the momentum at a point of
        the current subtree, the momentum sum up to it, and the momentum at the point
        before it (see :func:`checkpoint_range`); a row is added when a subtree first
        needs it, so a shallow tree stores few.
    depth, leaf
        The current subtree's depth and its points told.
    points
        The points told in this trajectory.
    energy0
        The Hamiltonian at the start.
    accept_sum
        ``min(1, exp(H0 - H))`` added over the points told.
    log_weight, subtree_log_weight
        The log sums of the weights ``exp(H0 - H)`` of the trajectory before the current
        subtree, and of the current subtree.
    transition
        The transition the tree belongs to (the chain's iteration once it ends). A tree
        is begun (its momentum drawn) when the transition before it ends, or when the
        initial point is told, so that its first point's ask and tell read the momentum
        instead of each drawing it; 0 in a state written before trees were begun then,
        whose tree between transitions is the last one's, finished.
    """

    left: Point
    right: Point
    sample: Point
    moved: bool
    subtree_sample: Point
    momentum_sum: FloatArray
    checkpoint_momentum: FloatArray
    checkpoint_sum: FloatArray
    checkpoint_previous: FloatArray
    depth: int
    leaf: int
    points: int
    energy0: float
    accept_sum: float
    log_weight: float
    subtree_log_weight: float
    transition: int = 0


@register("nuts.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A NUTS chain.

    Attributes
    ----------
    gradient
        The log density's gradient at ``position``.
    step
        Evaluations told in the current transition (the next ask's ``Proposal.step``).
    evaluations
        Every evaluation told (initial point and gradient check included).
    check
        The gradient check (:mod:`core.gradients.check`).
    adapt, step_size, metric, window
        The warm-up (:mod:`core.gradients.warmup`); ``metric`` is the inverse metric.
    tree_depth, n_steps, diverging, divergences, energy
        Of the last transition: its doublings, its leapfrog steps, whether it
        diverged, the divergences after warm-up so far, the Hamiltonian at the draw
        (Stan's ``treedepth__``, ``n_leapfrog__``, ``divergent__``, ``energy__``).
    trajectory
        The transition's tree in progress; with no point told (``points`` 0), the next
        transition's, begun: the starting point with its momentum drawn.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = WARMUP_COLD_FIELDS

    gradient: FloatArray
    step: int
    evaluations: int
    check: Check
    adapt: DualAveraging
    step_size: float
    metric: FloatArray
    window: MetricWindow
    tree_depth: int
    n_steps: int
    diverging: bool
    divergences: int
    energy: float
    trajectory: Trajectory


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    fields = new_gradient_fields(position, params, seed=seed, chain=chain)
    d = fields["position"].size
    return State(
        **fields,
        tree_depth=0,
        n_steps=0,
        diverging=False,
        divergences=0,
        energy=math.nan,
        trajectory=_idle(d, params),
    )


def checkpoint_range(leaf: int) -> tuple[int, int]:
    """The checkpoints that leaf ``leaf`` (from 0) of a subtree uses: ``(lo, hi)``. An
    even leaf is stored at checkpoint ``hi`` (then ``lo = hi + 1``); an odd one closes
    the subtrees that start at checkpoints ``hi, hi - 1, ..., lo``."""
    hi = bin(leaf >> 1).count("1")
    trailing = 0
    n = leaf
    while n & 1:
        n >>= 1
        trailing += 1
    return hi - trailing + 1, hi


def _frozen(a: FloatArray) -> FloatArray:
    """``a``, a new array that nothing else holds, made read-only in place."""
    a.flags.writeable = False
    return a


def _idle(dim: int, params: Params) -> Trajectory:
    """A new chain's placeholder for its trees."""
    zeros = frozen_array(np.zeros(dim))
    point = Point(zeros, zeros, zeros, 0.0, 0.0)
    empty = _no_checkpoints(dim)
    return Trajectory(
        point, point, point, False, point, zeros, empty, empty, empty,
        0, 0, 0, 0.0, 0.0, 0.0, -math.inf,
    )  # fmt: skip


def _begin(state: State, params: Params) -> Trajectory:
    """The tree in progress (or begun), or a new one of the starting point alone (a
    state written before trees were begun when the transition before them ended)."""
    tree = state.trajectory
    if tree.points or tree.transition == state.iteration + 1:
        return tree
    return _start(state)


def _start(state: State, metric: FloatArray | None = None) -> Trajectory:
    """The next transition's tree of the starting point alone: its momentum drawn from
    the transition's proposal stream, for the inverse metric ``metric`` (the state's
    unless given)."""
    t = state.iteration + 1
    if metric is None:
        metric = state.metric
    momentum = draw_momentum(generator(state.seed, state.chain, t, Stream.PROPOSE), metric)
    logdensity = state.logdensity
    assert logdensity is not None  # asked and told only once the initial point is
    energy0 = -logdensity + kinetic_energy(momentum, metric)
    start = Point(state.position, _frozen(momentum), state.gradient, logdensity, energy0)
    empty = _no_checkpoints(state.position.size)
    return Trajectory(
        left=start,
        right=start,
        sample=start,
        moved=False,
        subtree_sample=start,
        momentum_sum=start.momentum,
        checkpoint_momentum=empty,
        checkpoint_sum=empty,
        checkpoint_previous=empty,
        depth=0,
        leaf=0,
        points=0,
        energy0=energy0,
        accept_sum=0.0,
        log_weight=0.0,
        subtree_log_weight=-math.inf,
        transition=t,
    )


def _direction(state: State, params: Params, depth: int) -> float:
    """The direction of the transition's ``depth``-th doubling, ``1.0`` or ``-1.0``."""
    return _directions(state.seed, state.chain, state.iteration + 1, params.max_tree_depth)[depth]


@functools.lru_cache(maxsize=4096)
def _directions(seed: int, chain: int, iteration: int, doublings: int) -> tuple[float, ...]:
    """Every doubling's direction of a transition, from its mixture stream: drawn once,
    not at each of the transition's asks and tells (a cache of a pure function)."""
    draws: list[float] = generator(seed, chain, iteration, Stream.MIX).random(doublings).tolist()
    return tuple(1.0 if u < 0.5 else -1.0 for u in draws)


def _next_point(
    state: State, params: Params, tree: Trajectory
) -> tuple[FloatArray, FloatArray, float]:
    """The next point of the tree, the half-step momentum and the signed step."""
    eps = _direction(state, params, tree.depth) * state.step_size
    end = tree.right if eps > 0 else tree.left
    new, half = leapfrog_position(end.position, end.momentum, end.gradient, eps, state.metric)
    return new, half, eps


def _told_point(
    state: State, params: Params, tree: Trajectory, asked: FloatArray
) -> tuple[FloatArray, FloatArray, float]:
    """What :func:`_next_point` gives, for the point ``asked`` that :func:`ask` handed
    out: the point itself, so that only the half-step momentum is computed again. The
    point ``ask`` hands out in place of one that overflows is the current position; a
    point equal to it is computed again, so that such a tell sees the overflow."""
    if asked.tobytes() == state.position.tobytes():
        return _next_point(state, params, tree)
    eps = _direction(state, params, tree.depth) * state.step_size
    end = tree.right if eps > 0 else tree.left
    return asked, half_momentum(end.momentum, end.gradient, eps), eps


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    checking = check_ask(state)
    if checking is not None:
        return checking
    new, _, _ = _next_point(state, params, _begin(state, params))
    if not np.isfinite(new).all():
        new = state.position  # an overflow: its tell ends the transition (a divergence)
    return Proposal(state.iteration + 1, "leapfrog", frozen_array(new), 0.0, state.step)


def ask_many(states: Sequence[State], params: Params) -> list[Proposal]:
    """``[ask(s, params) for s in states]``, bit for bit, with the leapfrog points of all
    the chains between two points of their trees computed at once
    (:func:`core.gradients.hamiltonian.leapfrog_positions`)."""
    out: list[Proposal | None] = [None] * len(states)
    moving: list[int] = []
    ends: list[Point] = []
    steps: list[float] = []
    for i, state in enumerate(states):
        if state.logdensity is None or state.check.pending:
            out[i] = ask(state, params)  # its initial point or its gradient check
            continue
        tree = _begin(state, params)
        moving.append(i)
        steps.append(_direction(state, params, tree.depth) * state.step_size)
        ends.append(tree.right if steps[-1] > 0 else tree.left)
    if moving:
        eps = np.array(steps)
        halves = leapfrog_momenta(
            np.array([e.momentum for e in ends]), np.array([e.gradient for e in ends]), eps
        )
        metrics = [states[i].metric for i in moving]
        positions = np.array([e.position for e in ends])
        if len({m.shape for m in metrics}) == 1:
            news = leapfrog_positions(positions, halves, eps, np.array(metrics))
        else:  # not from one session: each chain's own
            news = np.array(
                [leapfrog_position(q, e.momentum, e.gradient, h, m)[0]
                 for q, e, h, m in zip(positions, ends, steps, metrics, strict=True)]
            )  # fmt: skip
        finite: npt.NDArray[np.bool_] = np.all(np.isfinite(news), axis=1)
        for j, i in enumerate(moving):
            state = states[i]
            new = news[j] if finite[j] else state.position  # an overflow, as ask hands out
            out[i] = Proposal(state.iteration + 1, "leapfrog", frozen_array(new), 0.0, state.step)
    return [o for o in out if o is not None]


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    raise ValueError(f"{NAME} needs the gradient of the log density at every point")


def tell_gradient(
    state: State, params: Params, proposal: Proposal, logdensity: float, gradient: FloatArray
) -> tuple[State, StepInfo]:
    g = check_gradient(NAME, logdensity, gradient, state.position.size)
    if not _leapfrog_told(state, proposal):
        return _tell_not_leapfrog(state, params, proposal, logdensity, g)
    tree = _begin(state, params)
    new, half, eps = _told_point(state, params, tree, proposal.position)
    energy = math.inf
    momentum = half
    if np.isfinite(new).all() and logdensity != -math.inf:
        momentum = leapfrog_momentum(half, g, eps)
        energy = -float(logdensity) + kinetic_energy(momentum, state.metric)
    return _grow(state, params, tree, new, momentum, g, logdensity, energy, eps)


def tell_gradient_many(
    states: Sequence[State],
    params: Params,
    proposals: Sequence[Proposal],
    logdensities: Sequence[float],
    gradients: Sequence[FloatArray | None],
) -> list[tuple[State, StepInfo]]:
    """``[tell_gradient(s, params, p, v, g) for ...]``, bit for bit, with the leapfrog
    points' second half-steps, kinetic energies, momentum sums and U-turn tests of all
    the chains computed at once (:func:`core.gradients.hamiltonian.leapfrog_momenta`,
    :func:`~core.gradients.hamiltonian.kinetic_energies`, :func:`~core.gradients.hamiltonian.turnings`):
    what is left per chain is its tree's bookkeeping (:func:`_grow`, as the one-chain
    tell). Raises as the first failing per-chain tell would, and then tells nothing."""
    out: list[tuple[State, StepInfo] | None] = [None] * len(states)
    leapfrog: list[int] = []
    told: list[FloatArray] = []
    for i, (state, proposal, value, gradient) in enumerate(
        zip(states, proposals, logdensities, gradients, strict=True)
    ):
        if gradient is None:
            raise ValueError(f"{NAME} needs the gradient of the log density at every point")
        g = check_gradient(NAME, value, gradient, state.position.size)
        if _leapfrog_told(state, proposal):
            leapfrog.append(i)
            told.append(g)
        else:
            out[i] = _tell_not_leapfrog(state, params, proposal, value, g)
    if leapfrog:
        trees = [_begin(states[i], params) for i in leapfrog]
        steps: list[float] = []
        ends: list[Point] = []
        for i, tree in zip(leapfrog, trees, strict=True):
            state = states[i]
            steps.append(_direction(state, params, tree.depth) * state.step_size)
            ends.append(tree.right if steps[-1] > 0 else tree.left)
        eps = np.array(steps)
        grads = np.array(told)
        halves = leapfrog_momenta(
            np.array([e.momentum for e in ends]), np.array([e.gradient for e in ends]), eps
        )
        momenta = leapfrog_momenta(halves, grads, eps)
        metrics = [states[i].metric for i in leapfrog]
        if len({m.shape for m in metrics}) == 1:
            kinetic = kinetic_energies(momenta, np.array(metrics)).tolist()
        else:  # not from one session: each chain's own
            kinetic = [kinetic_energy(p, m) for p, m in zip(momenta, metrics, strict=True)]
        news: list[FloatArray] = []
        finites: list[bool] = []
        energies: list[float] = []
        for j, i in enumerate(leapfrog):
            state, value = states[i], float(logdensities[i])
            new = proposals[i].position
            if new.tobytes() == state.position.tobytes():  # as _told_point: computed again
                new, _, _ = _next_point(state, params, trees[j])
            finite = bool(np.isfinite(new).all()) and value != -math.inf
            news.append(new)
            finites.append(finite)
            energies.append(-value + kinetic[j] if finite else math.inf)
        with np.errstate(over="ignore", invalid="ignore"):
            sums = np.array([t.momentum_sum for t in trees]) + momenta
        # The U-turn tests of every chain's tree at once.
        owners: list[tuple[int, int]] = []
        checks: list[_Check] = []
        for j, tree in enumerate(trees):
            if energies[j] - tree.energy0 <= DIVERGENCE:  # else not tested: a divergence
                for kind, tests in enumerate(
                    _turn_checks(params, tree, momenta[j], sums[j], steps[j] > 0)
                ):
                    for check in tests:
                        owners.append((j, kind))
                        checks.append(check)
        turns = [[False, False] for _ in trees]
        if checks:
            a, b, rho = (np.array(c) for c in zip(*checks, strict=True))
            chain_metrics = np.array([metrics[j] for j, _ in owners])
            for (j, kind), turning in zip(
                owners, turnings(a, b, rho, chain_metrics).tolist(), strict=True
            ):
                turns[j][kind] = turns[j][kind] or turning
        for j, i in enumerate(leapfrog):
            state, value, energy = states[i], float(logdensities[i]), energies[j]
            momentum = momenta[j].copy() if finites[j] else halves[j].copy()
            out[i] = _grow(
                state, params, trees[j], news[j], momentum, told[j], value, energy, steps[j],
                sums[j].copy(), (turns[j][0], turns[j][1]),
            )  # fmt: skip
    return [o for o in out if o is not None]


def _turn_checks(
    params: Params, tree: Trajectory, momentum: FloatArray, momentum_sum: FloatArray, forward: bool
) -> tuple[list[_Check], list[_Check]]:
    """The U-turn tests that :func:`_grow` makes when the point with ``momentum`` joins
    ``tree`` (``momentum_sum`` the tree's with it added): those of the subtrees the point
    closes, and those of the merged trajectory when its subtree completes the tree
    short of ``max_tree_depth``; all of them (``_grow`` stops at the first that turns)."""
    subtree: list[_Check] = []
    merged: list[_Check] = []
    if tree.leaf % 2:
        lo, hi = checkpoint_range(tree.leaf)
        subtree.extend(
            _subtree_checks(
                tree.checkpoint_momentum, tree.checkpoint_sum, tree.checkpoint_previous,
                lo, hi, momentum, momentum_sum,
            )
        )  # fmt: skip
    if tree.leaf + 1 == 1 << tree.depth and tree.depth + 1 < params.max_tree_depth:
        if tree.leaf == 0:  # the subtree is this point: its checkpoint is the point's
            first, first_sum = momentum, momentum_sum
            inner = tree.right.momentum if forward else tree.left.momentum
        else:
            first, first_sum = tree.checkpoint_momentum[0], tree.checkpoint_sum[0]
            inner = tree.checkpoint_previous[0]
        left, right = (tree.left.momentum, momentum) if forward else (momentum, tree.right.momentum)
        merged.extend(
            _merged_checks(tree, forward, left, right, momentum_sum, first, first_sum, inner)
        )
    return subtree, merged


def _leapfrog_told(state: State, proposal: Proposal) -> bool:
    """Whether ``proposal`` is the leapfrog point the chain waits for (``False``: its
    initial point or a point of its gradient check); raises when the chain waits for
    another leapfrog point."""
    if proposal.kind == "gradient_check" or state.logdensity is None:
        return False
    if (
        state.check.pending
        or proposal.kind != "leapfrog"
        or (proposal.iteration, proposal.step) != (state.iteration + 1, state.step)
    ):
        raise ValueError("proposal does not belong to this state")
    return True


def _tell_not_leapfrog(
    state: State, params: Params, proposal: Proposal, logdensity: float, g: FloatArray
) -> tuple[State, StepInfo]:
    """The tell of an initial point or of a point of the gradient check."""
    if proposal.kind == "gradient_check":
        new_state, info = check_tell(state, proposal, logdensity, g)
        return new_state.evolve(evaluations=state.evaluations + 1), info
    if proposal.kind != "init" or proposal.iteration != state.iteration:
        raise ValueError("proposal does not belong to this state")
    idle = dataclasses.replace(state.trajectory, points=0, transition=0)
    new_state, info = tell_initial_gradient(state, params, logdensity, g, trajectory=idle)
    if new_state.logdensity is None:  # told -inf: waits for a new initial point
        return new_state, info
    return new_state.evolve(trajectory=_start(new_state)), info


def _grow(
    state: State,
    params: Params,
    tree: Trajectory,
    new: FloatArray,
    momentum: FloatArray,
    g: FloatArray,
    logdensity: float,
    energy: float,
    eps: float,
    momentum_sum: FloatArray | None = None,
    turns: tuple[bool, bool] | None = None,
) -> tuple[State, StepInfo]:
    """The tree with the told point ``new`` (its momentum after the leapfrog step, the
    told gradient and log density, the Hamiltonian there, ``inf`` when the point or its
    log density is not finite) added at the end that step ``eps`` went from.

    ``momentum_sum`` (the tree's with ``momentum`` added) and ``turns`` (whether the
    subtrees the point closes turn, whether the merged trajectory turns, where the tree
    asks: :func:`_turn_checks`), when they are computed already."""
    t = state.iteration + 1
    common = {"step": state.step + 1, "evaluations": state.evaluations + 1}
    points = tree.points + 1
    error = energy - tree.energy0
    accept_sum = tree.accept_sum + (exp1(min(0.0, -error)) if math.isfinite(error) else 0.0)
    depth = tree.depth + 1  # the doublings of the tree once this subtree ends it
    if not error <= DIVERGENCE:  # also a number that is not one
        return _end(state, params, t, tree, points, accept_sum, depth, True, **common)
    point = Point(_frozen(new), _frozen(momentum), frozen_array(g), float(logdensity), energy)
    log_w = -error
    # The point's two accept uniforms: the first samples within a subtree of two points
    # or more, the second merges a completed subtree; a first leaf of a subtree that is
    # not complete with it (depth 1 or more) uses neither.
    stream = substream(Stream.ACCEPT, state.step)
    uniforms: list[float] = (
        generator(state.seed, state.chain, t, stream).random(2).tolist()
        if tree.leaf or not tree.depth
        else []
    )
    # Uniform progressive sampling within the subtree.
    if tree.leaf == 0:
        sub_sample, sub_log_w = point, log_w
    else:
        sub_log_w = log_add_exp(tree.subtree_log_weight, log_w)
        take = log1(uniforms[0]) < log_w - sub_log_w
        sub_sample = point if take else tree.subtree_sample
    forward = eps > 0
    left, right = (tree.left, point) if forward else (point, tree.right)
    momentum_sum = _frozen(tree.momentum_sum + momentum if momentum_sum is None else momentum_sum)
    # The U-turns within the subtree that this point closes (NumPyro's checkpoints,
    # with Stan's checks across the halves of each subtree).
    ckpt_momentum, ckpt_sum = tree.checkpoint_momentum, tree.checkpoint_sum
    ckpt_previous = tree.checkpoint_previous
    lo, hi = checkpoint_range(tree.leaf)
    if tree.leaf % 2 == 0:
        previous = tree.right.momentum if forward else tree.left.momentum
        ckpt_momentum, ckpt_sum, ckpt_previous = (
            _frozen(_with_row(ckpt_momentum, hi, momentum)),
            _frozen(_with_row(ckpt_sum, hi, momentum_sum)),
            _frozen(_with_row(ckpt_previous, hi, previous)),
        )
    elif (
        turns[0]
        if turns is not None
        else _subtree_turns(
            ckpt_momentum, ckpt_sum, ckpt_previous, lo, hi, momentum, momentum_sum, state.metric
        )
    ):
        return _end(state, params, t, tree, points, accept_sum, depth, False, **common)
    leaf = tree.leaf + 1
    log_weight = tree.log_weight
    sample, moved = tree.sample, tree.moved
    if leaf == 1 << tree.depth:
        # The subtree is complete: biased progressive sampling, then the merged
        # trajectory's U-turns.
        if log1(uniforms[1]) < sub_log_w - log_weight:
            sample, moved = sub_sample, True
        log_weight = log_add_exp(log_weight, sub_log_w)
        done = depth >= params.max_tree_depth or (
            turns[1]
            if turns is not None
            else _merged_turns(
                tree, forward, left, right, momentum_sum, ckpt_momentum, ckpt_sum,
                ckpt_previous, state.metric,
            )
        )  # fmt: skip
        grown = Trajectory(
            left, right, sample, moved, sub_sample, momentum_sum, ckpt_momentum, ckpt_sum,
            ckpt_previous, depth, 0, points, tree.energy0, accept_sum, log_weight, -math.inf,
            tree.transition,
        )  # fmt: skip
        if done:
            return _end(state, params, t, grown, points, accept_sum, depth, False, **common)
        return state.evolve(trajectory=grown, **common), StepInfo(
            t, "step", 1.0, t <= params.warmup
        )
    grown = Trajectory(
        left, right, sample, moved, sub_sample, momentum_sum, ckpt_momentum, ckpt_sum,
        ckpt_previous, tree.depth, leaf, points, tree.energy0, accept_sum, log_weight, sub_log_w,
        tree.transition,
    )  # fmt: skip
    return state.evolve(trajectory=grown, **common), StepInfo(t, "step", 1.0, t <= params.warmup)


def _no_checkpoints(dim: int) -> FloatArray:
    return frozen_array(np.zeros((0, dim)))


def _with_row(a: FloatArray, i: int, row: FloatArray) -> FloatArray:
    """A copy of ``a`` with row ``i`` set to ``row``, one row longer if ``i`` is the
    next row (the checkpoints a subtree uses grow with its depth)."""
    out = np.concatenate([a, row[None, :]]) if i == a.shape[0] else np.array(a)
    out[i] = row
    return out


#: A U-turn test: the momenta at a stretch's two ends and the sum of its momenta.
_Check = tuple[FloatArray, FloatArray, FloatArray]


def _subtree_turns(
    ckpt_momentum: FloatArray,
    ckpt_sum: FloatArray,
    ckpt_previous: FloatArray,
    lo: int,
    hi: int,
    momentum: FloatArray,
    momentum_sum: FloatArray,
    metric: FloatArray,
) -> bool:
    """Whether one of the subtrees that the point with ``momentum`` closes turns
    (:func:`_subtree_checks`, tested in turn until one turns)."""
    checks = _subtree_checks(ckpt_momentum, ckpt_sum, ckpt_previous, lo, hi, momentum, momentum_sum)
    return any(is_turning(a, b, rho, metric) for a, b, rho in checks)


def _subtree_checks(
    ckpt_momentum: FloatArray,
    ckpt_sum: FloatArray,
    ckpt_previous: FloatArray,
    lo: int,
    hi: int,
    momentum: FloatArray,
    momentum_sum: FloatArray,
) -> Iterator[_Check]:
    """The U-turn tests of the subtrees that the point with ``momentum`` closes: the
    one starting at checkpoint ``i`` (for ``i`` from ``hi`` down to ``lo``), and, as Stan
    checks, its left half with the right half's first point, and its right half with
    the left half's last point (the right half starts at checkpoint ``i + 1``)."""
    for i in range(hi, lo - 1, -1):
        start = ckpt_momentum[i]
        yield start, momentum, momentum_sum - ckpt_sum[i] + start
        if i < hi:
            middle, before = ckpt_momentum[i + 1], ckpt_previous[i + 1]
            yield start, middle, ckpt_sum[i + 1] - ckpt_sum[i] + start
            right = momentum_sum - ckpt_sum[i + 1] + middle
            yield before, momentum, right + before


def _merged_turns(
    tree: Trajectory,
    forward: bool,
    left: Point,
    right: Point,
    momentum_sum: FloatArray,
    ckpt_momentum: FloatArray,
    ckpt_sum: FloatArray,
    ckpt_previous: FloatArray,
    metric: FloatArray,
) -> bool:
    """Whether the trajectory, its completed subtree merged in, turns
    (:func:`_merged_checks`, tested in turn until one turns)."""
    checks = _merged_checks(
        tree, forward, left.momentum, right.momentum, momentum_sum,
        ckpt_momentum[0], ckpt_sum[0], ckpt_previous[0],
    )  # fmt: skip
    return any(is_turning(a, b, rho, metric) for a, b, rho in checks)


def _merged_checks(
    tree: Trajectory,
    forward: bool,
    left: FloatArray,
    right: FloatArray,
    momentum_sum: FloatArray,
    first: FloatArray,
    first_sum: FloatArray,
    inner: FloatArray,
) -> Iterator[_Check]:
    """The U-turn tests of the trajectory, its completed subtree merged in, from the
    momenta ``left`` and ``right`` at its ends: as a whole, and (Stan's checks) the old
    part with the subtree's first point, the subtree with the old part's last point
    (``first``, ``first_sum`` and ``inner``: the subtree's first checkpoint)."""
    yield left, right, momentum_sum
    old_sum = first_sum - first
    outer = tree.left.momentum if forward else tree.right.momentum
    yield outer, first, old_sum + first
    new_end = right if forward else left
    yield inner, new_end, momentum_sum - old_sum + inner


def _end(
    state: State,
    params: Params,
    t: int,
    tree: Trajectory,
    points: int,
    accept_sum: float,
    depth: int,
    diverging: bool,
    *,
    step: int,
    evaluations: int,
) -> tuple[State, StepInfo]:
    """The transition's end: the draw is the tree's candidate, then the warm-up."""
    sample = tree.sample
    prob = accept_sum / points
    new = state.evolve(
        position=sample.position,
        logdensity=sample.logdensity,
        gradient=sample.gradient,
        iteration=t,
        accepted=state.accepted + tree.moved,
        step=0,
        evaluations=evaluations,
        tree_depth=depth,
        n_steps=points,
        diverging=diverging,
        divergences=state.divergences + (diverging and t > params.warmup),
        energy=sample.energy,
    )
    changes = warmup_changes(new, params, prob, t)
    # The next tree, begun with the inverse metric the warm-up leaves: its momentum is
    # drawn here, once, not at its first point's ask and again at its tell.
    new = new.evolve(**changes, trajectory=_start(new, changes.get("metric", new.metric)))
    outcome: Literal["accepted", "rejected"] = "accepted" if tree.moved else "rejected"
    return new, StepInfo(t, outcome, prob, t <= params.warmup)


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    position and gradient, the tree's four points (3 vectors each) and momentum sum,
    its ``3 max_tree_depth`` checkpoints, the metric window (4 vectors, and the
    positions' outer products for a dense metric), the metric, and the vectors and
    Cholesky factor a leapfrog step works with; and about 100 floats' worth of scalars
    and field names in the stored document (the tree's points are documents of their
    own)."""
    dense = 3 * dim * dim if params.metric == "dense" else 0
    return 100 + (25 + 3 * params.max_tree_depth) * dim + dense


#: The sampler as the registry (:data:`core.SAMPLERS`) knows it.
SAMPLER: Sampler[State, Params] = Sampler(
    name=NAME,
    Params=Params,
    State=State,
    make_params=make_params,
    init=init,
    ask=ask,
    ask_many=ask_many,
    tell=tell,
    chain_floats=chain_floats,
    metropolis_adapt=None,
    evaluation=Evaluation(gradient=True),
    tell_gradient=tell_gradient,
    tell_gradient_many=tell_gradient_many,
    stats=("step_size", "tree_depth", "n_steps", "diverging", "energy"),
    acceptance_checked=False,  # a multinomial draw from the trajectory moves almost always
)
