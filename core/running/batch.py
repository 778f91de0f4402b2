"""Many chains of one sampler stepped together: ``ask_many`` and ``tell_many``.

A service ``step`` with 256 chains, or :func:`core.running.inprocess.sample` with its chains side by
side, asks and tells every chain of a session at once. Called chain by chain, a
Metropolis ``tell`` spends most of its time in Python around a little arithmetic: it
keys a Philox generator for the iteration's accept stream, draws two uniforms, decides,
and builds the new state. Here the accept streams of all the chains come out of one
:func:`core.numerics.philox.uniforms` call, arrays in and out, and only the decision and the
sampler's adaptation run per chain, through the very functions the per-chain ``tell``
uses. The result is bit for bit the per-chain result (``tests/core/test_batch.py``
checks it for every sampler, over whole runs), whatever the batch: chains may be at
different iterations, in warm-up or past it, waiting for their initial point, or told
``-inf``.

A sampler takes part by giving its record (:class:`core.interface.sampler.Sampler`) the adaptation its
``tell`` hands to :func:`core.interface.metropolis.metropolis_tell`, as ``metropolis_adapt``, or batched
parts of its own: ``tell_gradient_many`` and ``ask_many`` (``nuts``, whose leapfrog
points each cost a tell of small-vector arithmetic: its chains' half-steps, kinetic
energies and U-turn tests are computed as arrays, its trees' bookkeeping chain by
chain); the others (the kernel samplers, whose iterations cost 100 us or more of their
own arithmetic) are stepped chain by chain here, with the same results.

The proposals' normals are not batched: numpy's ziggurat draws them, with a rejection
step and tables of its own, and computing them as arrays equal to its per-chain output
would mean reimplementing it. Each chain's normals are drawn by its own ``ask``, or, for
``hmc`` and ``nuts``, by its own tell: a transition's momentum is drawn when the one
before it ends, and its leapfrog points are arithmetic on the trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kameleon.core.interface.chain import FloatArray, Parts, Proposal, StepInfo
from kameleon.core.interface.metropolis import Adapt, accept_or_reject, check_tell, tell_initial
from kameleon.core.interface.sampler import Sampler, tell_one
from kameleon.core.numerics.philox import uniforms
from kameleon.core.numerics.rng import Stream, generator

__all__ = ["accept_block", "accept_uniforms", "ask_many", "tell_many"]


def ask_many(sampler: Sampler[Any, Any], states: Sequence[Any], params: Any) -> list[Proposal]:
    """``[sampler.ask(state, params) for state in states]``, through the sampler's
    ``ask_many`` when it has one (the same proposals)."""
    if sampler.ask_many is not None:
        return sampler.ask_many(states, params)
    ask = sampler.ask
    return [ask(state, params) for state in states]


def tell_many(
    sampler: Sampler[Any, Any],
    states: Sequence[Any],
    params: Any,
    proposals: Sequence[Proposal],
    logdensities: Sequence[float],
    *,
    accept: Sequence[Sequence[float]] | None = None,
    gradients: Sequence[FloatArray | None] | None = None,
    parts: Sequence[Parts | None] | None = None,
    conditional_draws: Sequence[FloatArray | None] | None = None,
) -> list[tuple[Any, StepInfo]]:
    """``[sampler.tell(s, params, p, v) for s, p, v in zip(states, proposals,
    logdensities)]``, with the accept streams of every chain drawn at once.

    ``accept``: the two accept-stream uniforms of each chain told a proposal (not an
    initial point), in order, when the caller drew them already (:func:`accept_block`
    draws many iterations' at once); else they are drawn here. ``gradients``: the told
    gradients, for a sampler that needs them (:func:`core.interface.sampler.tell_one`), told through
    its ``tell_gradient_many`` when it has one (``nuts``), else chain by chain; ``parts``: the told parts of the target, likewise, for a sampler
    told them (``sgld``); ``draws``: the client's draws at conditional proposals, for a
    sampler told them (``gibbs``), likewise.

    Raises
    ------
    ValueError
        As the first failing per-chain ``tell`` would: a proposal that is not the one
        its state waits for, or a log density that is NaN or ``+inf``. Nothing is told.
    """
    if not (len(states) == len(proposals) == len(logdensities)):
        raise ValueError("states, proposals and log densities must have the same length")
    adapt: Adapt[Any, Any] | None = sampler.metropolis_adapt
    if sampler.tell_draw is not None:
        drawn = conditional_draws if conditional_draws is not None else [None] * len(states)
        return [
            tell_one(sampler, s, params, p, float(v), draw=d)
            for s, p, v, d in zip(states, proposals, logdensities, drawn, strict=True)
        ]
    if sampler.tell_parts is not None:
        told = parts if parts is not None else [None] * len(states)
        return [
            tell_one(sampler, s, params, p, float(v), parts=t)
            for s, p, v, t in zip(states, proposals, logdensities, told, strict=True)
        ]
    if sampler.tell_gradient is not None:
        grads = gradients if gradients is not None else [None] * len(states)
        if sampler.tell_gradient_many is not None:
            values = [float(v) for v in logdensities]
            return sampler.tell_gradient_many(states, params, proposals, values, grads)
        return [
            tell_one(sampler, s, params, p, float(v), g)
            for s, p, v, g in zip(states, proposals, logdensities, grads, strict=True)
        ]
    if adapt is None:
        tell = sampler.tell
        return [
            tell(s, params, p, float(v))
            for s, p, v in zip(states, proposals, logdensities, strict=True)
        ]
    values = [float(v) for v in logdensities]
    moving = []
    for i, (state, proposal, value) in enumerate(zip(states, proposals, values, strict=True)):
        check_tell(state, proposal, value)
        if proposal.kind == "proposal":
            moving.append(i)
    if accept is None:
        draws = accept_uniforms(states, proposals, moving)
    elif len(accept) != len(moving):
        raise ValueError("accept must hold two uniforms per chain told a proposal")
    else:
        draws = accept
    out: list[tuple[Any, StepInfo]] = []
    k = 0
    for state, proposal, value in zip(states, proposals, values, strict=True):
        if proposal.kind == "init":
            out.append(tell_initial(state, proposal, value))
            continue
        u_accept, u_adapt = draws[k]
        k += 1
        new, info = accept_or_reject(state, proposal, value, u_accept, warmup=params.warmup)
        out.append((adapt(state, new, params, proposal, info, u_adapt), info))
    return out


#: Below this many chains, keying one Philox generator per chain is faster than the
#: array Philox, whose ten rounds cost about 170 us of numpy calls whatever the size (on
#: the machine of BENCHMARKS.md; 256 chains: 210 us against 460 us chain by chain).
ARRAY_PHILOX_MIN = 128


def accept_uniforms(
    states: Sequence[Any], proposals: Sequence[Proposal], moving: Sequence[int]
) -> Sequence[Sequence[float]]:
    """The two accept-stream uniforms of each chain ``moving`` names, as
    :func:`core.interface.metropolis.metropolis_transition` draws them."""
    if len(moving) < ARRAY_PHILOX_MIN:
        return [
            generator(states[i].seed, states[i].chain, proposals[i].iteration, Stream.ACCEPT)
            .random(2)
            .tolist()
            for i in moving
        ]
    seed = np.fromiter((states[i].seed for i in moving), np.uint64, len(moving))
    chain = np.fromiter((states[i].chain for i in moving), np.uint64, len(moving))
    iteration = np.fromiter((proposals[i].iteration for i in moving), np.uint64, len(moving))
    table: list[list[float]] = uniforms(seed, chain, iteration, Stream.ACCEPT, 2).tolist()
    return table


def accept_block(states: Sequence[Any], first: int, count: int) -> FloatArray:
    """The accept-stream uniforms of ``states``' chains for iterations ``first`` to
    ``first + count - 1``, shape ``(count, len(states), 2)``: one array Philox call for
    a whole block of iterations, for callers that know them in advance."""
    seed = np.array([s.seed for s in states], dtype=np.uint64)
    chain = np.array([s.chain for s in states], dtype=np.uint64)
    iteration = np.arange(first, first + count, dtype=np.uint64)
    n = len(states)
    table = uniforms(
        np.tile(seed, count), np.tile(chain, count), np.repeat(iteration, n), Stream.ACCEPT, 2
    )
    return table.reshape(count, n, 2)
