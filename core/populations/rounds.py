"""Rounds: the evaluations of a chain that can be handed out together.

A chain is one sequence of evaluations, each proposed from the state the ones before it
left. For some samplers the next few do not depend on one another's told values: an
ensemble's half-step (each walker moves from the other half's positions as they were when
the half-step began), a population's sweep (each particle moves on its own, with the
stage's proposal), a ladder's rungs (each rung steps on its own before the swaps), the
independent draws of a fixed importance proposal. Those evaluations are the chain's
*round*: its sampler's ``ask_ahead`` gives each of them from the state before any of
them is told, the very proposal ``ask`` would give once the ones before it are told,
whatever their values. So a service may hand out a whole round at once and take its
results in any order, applying them in the chain's order: the chain's draws are those
of the same results told one by one, bit for bit.

A round runs along a chain's iterations (one evaluation each) or, for a sampler whose
transitions take several evaluations (``tempering``), along the steps of one transition.
"""

from __future__ import annotations

from typing import Any

from kameleon.core.interface.chain import Proposal
from kameleon.core.interface.sampler import Sampler, takes_steps

__all__ = ["offset", "proposals", "size"]


def size(sampler: Sampler[Any, Any], state: Any, params: Any) -> int:
    """The evaluations left in the chain's round, the outstanding one included (1 for a
    sampler without rounds, and for a chain waiting for its initial point's value)."""
    if sampler.round_size is None or state.logdensity is None:
        return 1
    return max(1, int(sampler.round_size(state, params)))


def proposals(
    sampler: Sampler[Any, Any], state: Any, params: Any, start: int = 0, stop: int | None = None
) -> list[Proposal]:
    """The round's proposals ``start`` up to ``stop`` (clipped to the round), counted
    from the outstanding one (0)."""
    n = size(sampler, state, params)
    stop = n if stop is None else min(stop, n)
    out = []
    for k in range(max(0, start), stop):
        if k == 0 or sampler.ask_ahead is None:
            out.append(sampler.ask(state, params))
        else:
            out.append(sampler.ask_ahead(state, params, k))
    return out


def offset(
    sampler: Sampler[Any, Any], state: Any, outstanding: Proposal, iteration: int, step: int
) -> int:
    """How many evaluations after ``outstanding`` (the chain's, 0) the evaluation
    ``(iteration, step)`` comes, along the chain's rounds: negative for one told before,
    and for one beyond the round the count it would be if rounds never ended."""
    if takes_steps(sampler):
        if iteration != outstanding.iteration:
            return -1 if iteration < outstanding.iteration else 1 << 30
        return step - outstanding.step
    if step:
        return 1 << 30  # never issued: these transitions evaluate once
    return iteration - outstanding.iteration
