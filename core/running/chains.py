"""Chains advanced in process: the recorder of one chain's rows, and many chains of one
sampler advanced side by side (:func:`advance_together`), as :mod:`core.running.inprocess` runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray, Parts, Proposal, StepInfo, frozen_array
from kameleon.core.interface.sampler import Sampler, takes_steps, tell_one, transition_stats
from kameleon.core.numerics.rng import Stream, fresh_generator, substream
from kameleon.core.running.batch import accept_block, ask_many, tell_many
from kameleon.core.running.initial import DEFAULT_MAX_ATTEMPTS, initial_point, redraw, start_radius

__all__ = [
    "ChainResult",
    "ConditionalFn",
    "EvaluateMany",
    "LogDensityFn",
    "Runner",
    "advance_together",
    "check_conditionals",
]

LogDensityFn = Callable[..., Any]
"""The log density at a point, a float; for a sampler that needs gradients
(:class:`core.interface.sampler.Evaluation`), the pair ``(log density, gradient)``; for one told the
target in parts (``sgld``), ``f(x, minibatch)`` gives the four ``(log prior, log
likelihood, prior gradient, likelihood gradient)``, the likelihood's the sum over the
minibatch's data points (:class:`core.interface.chain.Parts`); for ``tempering`` or ``smc`` of the likelihood,
the pair ``(log prior, log likelihood)``."""
ConditionalFn = Callable[[FloatArray, np.random.Generator], npt.ArrayLike]
"""A draw of one block from its full conditional (``gibbs``): ``draw(x, rng)`` with ``x``
the chain's current point (read-only, every coordinate) and ``rng`` a numpy generator
seeded from the chain's seed, the iteration and the step (a run replays), returns the
block's values in the block's order."""
#: Evaluates the log density at every chain's proposal of one iteration at once (in
#: parallel, or in one vectorised call); the values in the order of the points.
EvaluateMany = Callable[[list[FloatArray]], list[float]]


@dataclass(frozen=True, eq=False)
class ChainResult:
    """What :func:`core.running.inprocess.run_chain` recorded, one row per transition.

    Attributes
    ----------
    draws
        The chain's position after each transition, shape ``(n, dim)``.
    logdensity
        The chain's (cached) log density after each transition, shape ``(n,)``.
    told
        The log density told for each transition's proposal, shape ``(n,)``.
    accepted
        Whether each proposal was accepted, shape ``(n,)``.
    acceptance_probability
        ``min(1, alpha)`` of each proposal, shape ``(n,)``.
    state
        The final state.
    stats
        The sampler's per-transition statistics, shape ``(n, len(stat_names))``.
    stat_names
        Their names (the sampler record's ``stats``).
    """

    draws: FloatArray
    logdensity: FloatArray
    told: FloatArray
    accepted: npt.NDArray[np.bool_]
    acceptance_probability: FloatArray
    state: Any
    stats: FloatArray
    stat_names: tuple[str, ...] = ()

    def stat(self, name: str) -> FloatArray | None:
        """One per-transition statistic (``None`` if the sampler does not record it)."""
        if name not in self.stat_names:
            return None
        return self.stats[:, self.stat_names.index(name)]


class Runner:
    """One chain, advanced a number of transitions at a time, its rows recorded."""

    def __init__(
        self,
        sampler: Sampler[Any, Any],
        params: Any,
        logdensity_fn: LogDensityFn,
        initial: npt.ArrayLike | None,
        capacity: int,
        *,
        seed: int,
        chain: int,
        initial_radius: float | None = None,
        max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS,
        evaluate_many: EvaluateMany | None = None,
        conditionals: Mapping[int, ConditionalFn] | None = None,
    ) -> None:
        self.sampler, self.params, self.logdensity_fn = sampler, params, logdensity_fn
        self.conditionals = check_conditionals(sampler, params, conditionals)
        self.evaluate_many = evaluate_many
        radius = start_radius(initial is not None, initial_radius)
        if max_initial_attempts < 1:
            raise ValueError("max_initial_attempts must be positive")
        center = None if initial is None else np.asarray(initial, dtype=np.float64)
        if radius is None:
            start = center
        else:
            dim = params.dim if center is None else center.size
            start = initial_point(
                dim, seed=seed, chain=chain, attempt=0, center=center, radius=radius
            )
        state = sampler.init(start, params, seed=seed, chain=chain)
        while True:
            proposal = sampler.ask(state, params)
            logdensity_0, gradient_0, parts_0 = evaluate_parts(
                sampler, params, logdensity_fn, proposal
            )
            state, info = tell_one(
                sampler, state, params, proposal, logdensity_0, gradient_0, parts_0
            )
            if info.outcome != "outside_support":
                break
            state = redraw(state, center=center, radius=radius, max_attempts=max_initial_attempts)
            if state is None:
                tried = "" if radius is None else f" (after {max_initial_attempts} drawn points)"
                raise ValueError(f"the log density of the initial point is -inf{tried}")
        self.state = state
        self.n = 0
        dim = state.position.size
        self.draws = np.empty((capacity, dim))
        self.logdensity = np.empty(capacity)
        self.told = np.empty(capacity)
        self.accepted = np.empty(capacity, dtype=bool)
        self.acceptance_probability = np.empty(capacity)
        self.stats = np.empty((capacity, len(sampler.stats)))

    def advance(self, transitions: int) -> None:
        advance_together([self], transitions)

    def record(self, i: int, told: float, state: Any, info: StepInfo) -> None:
        self.told[i] = told
        self.draws[i] = state.position
        self.logdensity[i] = state.logdensity
        self.accepted[i] = info.outcome == "accepted"
        self.acceptance_probability[i] = info.acceptance_probability
        if self.stats.shape[1]:
            self.stats[i] = transition_stats(self.sampler, state)

    def result(self) -> ChainResult:
        n = self.n
        accepted = self.accepted[:n].copy()
        accepted.flags.writeable = False
        return ChainResult(
            draws=frozen_array(self.draws[:n]),
            logdensity=frozen_array(self.logdensity[:n]),
            told=frozen_array(self.told[:n]),
            accepted=accepted,
            acceptance_probability=frozen_array(self.acceptance_probability[:n]),
            state=self.state,
            stats=frozen_array(self.stats[:n]),
            stat_names=self.sampler.stats,
        )


#: Iterations whose accept streams :func:`advance_together` draws at once.
_BLOCK = 512


def advance_together(runners: Sequence[Runner], transitions: int) -> None:
    """Advance chains of one sampler and one log density side by side, ``transitions``
    each: per iteration, every chain's proposal (:func:`core.running.batch.ask_many`), the log
    densities, then every chain's step (:func:`core.running.batch.tell_many`), with the accept
    streams of many iterations drawn at once (:func:`core.running.batch.accept_block`). Each
    chain's draws are those it would make alone; only the order of the log-density
    calls differs. Every chain has its initial point and has made as many transitions
    as the others. With the first runner's ``evaluate_many``, an iteration's log
    densities are asked of it in one call.

    Interrupted (``KeyboardInterrupt``), every chain keeps the transitions that every
    chain completed, and the interruption goes on up."""
    if not runners:
        return
    first_sampler = runners[0].sampler
    if takes_steps(first_sampler) or first_sampler.tell_parts is not None:
        for runner in runners:
            _advance_with_gradients(runner, transitions)
        return
    sampler, params, fn = runners[0].sampler, runners[0].params, runners[0].logdensity_fn
    many = runners[0].evaluate_many
    states = [r.state for r in runners]
    first = runners[0].n + 1  # the iteration of every chain's next proposal
    batched = sampler.metropolis_adapt is not None
    block: Any = None
    done = 0
    try:
        for step in range(transitions):
            if step % _BLOCK == 0 and batched:
                block = accept_block(states, first + step, min(_BLOCK, transitions - step))
                block = block.tolist()
            proposals = ask_many(sampler, states, params)
            if many is not None:
                values = [float(v) for v in many([p.position for p in proposals])]
            else:
                values = [float(fn(p.position)) for p in proposals]
            told = tell_many(
                sampler,
                states,
                params,
                proposals,
                values,
                accept=block[step % _BLOCK] if batched else None,
            )
            for runner, value, (state, info) in zip(runners, values, told, strict=True):
                runner.record(runner.n + step, value, state, info)
            states = [state for state, _ in told]
            done = step + 1
    finally:
        for runner, state in zip(runners, states, strict=True):
            runner.state = state
            runner.n += done


def evaluate(
    sampler: Sampler[Any, Any], fn: LogDensityFn, x: FloatArray
) -> tuple[float, FloatArray | None]:
    """``fn`` at ``x``: the log density, and the gradient for a sampler that needs one
    (``fn`` then returns the pair)."""
    if sampler.tell_gradient is None:
        return float(fn(x)), None
    out = fn(x)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(
            f"{sampler.name} needs the gradient: the log density function must return the "
            "pair (log density, gradient)"
        )
    value, gradient = out
    return float(value), np.asarray(gradient, dtype=np.float64)


def evaluate_parts(
    sampler: Sampler[Any, Any], params: Any, fn: LogDensityFn, proposal: Proposal
) -> tuple[float, FloatArray | None, Parts | None]:
    """``fn`` at ``proposal``: :func:`evaluate`'s pair, and for a sampler told the
    target in parts (``evaluation.parts``) the parts from ``fn(x, minibatch)``, whose
    value is the estimate ``log prior + (N / n) log likelihood``; for one that needs the
    log prior and log likelihood apart without gradients (its ``needs_parts``), the
    pair ``fn(x)``, whose value is their sum."""
    needs_parts = sampler.needs_parts
    if needs_parts is not None and needs_parts(params):
        pair = fn(proposal.position)
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(
                f"{sampler.name} with these options tempers the likelihood: the function "
                "must return the pair (log prior, log likelihood)"
            )
        log_prior, log_likelihood = float(pair[0]), float(pair[1])
        nan = np.full(proposal.position.size, np.nan)
        split = Parts(log_prior, log_likelihood, nan, nan)
        value = -np.inf if log_prior == -np.inf else log_prior + log_likelihood
        return float(value), None, split
    if not sampler.evaluation.parts:
        value, gradient = evaluate(sampler, fn, proposal.position)
        return value, gradient, None
    out = fn(proposal.position, list(proposal.minibatch or ()))
    if not (isinstance(out, tuple) and len(out) == 4):
        raise TypeError(
            f"{sampler.name} is told the target in parts: the function f(x, minibatch) must "
            "return (log prior, log likelihood, prior gradient, likelihood gradient), the "
            "likelihood's summed over the minibatch's data points"
        )
    log_prior, log_likelihood, prior_gradient, likelihood_gradient = out
    parts = Parts(
        float(log_prior),
        float(log_likelihood),
        np.asarray(prior_gradient, dtype=np.float64),
        np.asarray(likelihood_gradient, dtype=np.float64),
    )
    if sampler.parts_value is None:
        raise TypeError(f"{sampler.name} gives no parts_value")
    return sampler.parts_value(params, parts), None, parts


def check_conditionals(
    sampler: Sampler[Any, Any], params: Any, conditionals: Mapping[int, ConditionalFn] | None
) -> dict[int, ConditionalFn]:
    """``conditionals`` checked against the sampler's conditional blocks (``gibbs``):
    one draw function for each, keyed by the block's place in ``blocks``
    (a ``ValueError`` naming what is missing or extra)."""
    given = dict(conditionals or {})
    wanted: set[int] = set()
    if sampler.conditional_indices is not None:
        blocks = getattr(params, "blocks", None) or ()
        wanted = {b for b, block in enumerate(blocks) if block.conditional}
    if missing := sorted(wanted - set(given)):
        raise ValueError(
            f"block {missing[0]} is conditional: give conditionals={{{missing[0]}: draw}}, "
            "draw(x, rng) returning the block's values drawn from its full conditional"
        )
    if extra := sorted(set(given) - wanted):
        raise ValueError(f"conditionals: block {extra[0]} is not a conditional block")
    return given


def _conditional(runner: Runner, state: Any, proposal: Proposal) -> tuple[FloatArray, float]:
    """The client's part of a conditional proposal, in process: the block drawn by its
    function and the log density at the point it makes."""
    assert proposal.block is not None and proposal.indices is not None
    rng = fresh_generator(
        state.seed, state.chain, proposal.iteration, substream(Stream.MIX, proposal.step)
    )
    draw = np.asarray(
        runner.conditionals[proposal.block](proposal.position, rng), dtype=np.float64
    ).reshape(-1)
    point = np.array(proposal.position)
    if draw.shape == (len(proposal.indices),):
        point[list(proposal.indices)] = draw
    point.flags.writeable = False
    return draw, float(runner.logdensity_fn(point))


def _advance_with_gradients(runner: Runner, transitions: int) -> None:
    """:func:`advance_together` for one chain of a sampler whose transitions need
    several evaluations with gradients: every evaluation in turn, a draw recorded at
    the end of each transition."""
    sampler, params, fn = runner.sampler, runner.params, runner.logdensity_fn
    state = runner.state
    done = 0
    try:
        while done < transitions:
            proposal = sampler.ask(state, params)
            draw: FloatArray | None = None
            if proposal.kind == "conditional":
                draw, value = _conditional(runner, state, proposal)
                gradient, parts = None, None
            else:
                value, gradient, parts = evaluate_parts(sampler, params, fn, proposal)
            state, info = tell_one(
                sampler, state, params, proposal, value, gradient, parts, draw=draw
            )
            if info.outcome != "step":
                runner.record(runner.n + done, value, state, info)
                done += 1
    finally:
        # Interrupted mid-transition, the state holds the evaluations told so far: the
        # next ask goes on from there.
        runner.state = state
        runner.n += done
