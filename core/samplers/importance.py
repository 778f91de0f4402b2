"""Importance sampling with a proposal learnt by adaptive Metropolis: each chain runs
``am`` through warm-up, then draws independent points from a Student-t (or Gaussian)
fitted to its last warm-up window, and weighs them.

Warm-up is ``am``'s, to the bit (its options, its windows): the chain finds the typical
set and learns its mean and covariance. At the end of warm-up the chain fixes its
proposal ``q = t_nu(m, c S)``: ``m`` and ``S`` the mean and covariance of the states of
``am``'s last warm-up window, ``c = inflation (nu - 2) / nu`` (the Student-t's covariance
is then ``inflation S``; wider tails than the target's keep the weights bounded).

After warm-up every transition draws ``x ~ q`` from the iteration's proposal stream, the
client tells ``log p(x)``, and the draw is ``x`` with the log weight
``log w = log p(x) - log q(x)`` (the per-draw statistic ``log_weight``; ``-inf`` where
``p`` is 0). Nothing is accepted or rejected, and with C chains one ask of C points is
one round of C independent particles. The post-warm-up draws are plain importance
samples: ``mean(w)`` estimates the normalising constant of ``p`` without bias (the
evidence, when ``p`` is prior times likelihood), and weighted averages estimate
expectations (:mod:`core.populations.evidence`). Across chains the draws are weighed against the
mixture of every chain's proposal (:func:`mixture_log_weights`): chains that found
different modes together cover them all.

Arithmetic: the draws use :mod:`core.numerics.arithmetic` and integer-degree chi-squared draws
(sums of squared normals), so that the same seed gives the same draws on every machine.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

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
from kameleon.core.interface.metropolis import check_tell
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics.arithmetic import exp, exp1, log, log1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import dot, matvec, solve_lower_rows
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.samplers import am
from kameleon.core.tuning.adaptation import usable_covariance

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "ask_ahead",
    "chain_floats",
    "init",
    "log_proposal",
    "make_params",
    "mixture_log_weights",
    "modes",
    "round_size",
    "tell",
]

NAME = "importance"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of importance sampling.

    Attributes
    ----------
    proposal
        ``"student_t"`` (default) or ``"gaussian"``.
    dof
        The Student-t's degrees of freedom (default 5; an integer from 1 to 1000).
    inflation
        The proposal's covariance over the target's estimate (default 1.5; at least 1).
    particles
        The draws of one round after warm-up (default 32; 1 to 4096): independent draws
        of the fixed proposal, which a service hands out together.
    initial_scale, adapt_start, nugget, target_acceptance, windows
        The warm-up's ``am`` options (see ``am``).
    """

    dim: int
    warmup: int
    proposal: Literal["student_t", "gaussian"] = "student_t"
    dof: int = 5
    inflation: float = 1.5
    particles: int = 32
    initial_scale: float = 1.0
    adapt_start: int | None = None
    nugget: float = 1e-6
    target_acceptance: float = 0.234
    windows: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.dof <= 1000:
            raise OptionError("dof", "must be an integer from 1 to 1000")
        if not (math.isfinite(self.inflation) and self.inflation >= 1):
            raise OptionError("inflation", "must be at least 1")
        if not 1 <= self.particles <= 4096:
            raise OptionError("particles", "must be an integer from 1 to 4096")
        self.walker  # checks the am options  # noqa: B018

    @property
    def walker(self) -> am.Params:
        """The warm-up's ``am`` options."""
        return _walker_params(self)


@functools.lru_cache(maxsize=1024)
def _walker_params(params: Params) -> am.Params:
    return am.Params(
        dim=params.dim,
        warmup=params.warmup,
        initial_scale=params.initial_scale,
        adapt_start=params.adapt_start,
        nugget=params.nugget,
        target_acceptance=params.target_acceptance,
        windows=params.windows,
    )


@register("importance.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """An importance sampling chain: its common fields are the last draw's.

    Attributes
    ----------
    walker
        The warm-up's ``am`` chain (unchanged after warm-up).
    mean, chol
        The proposal's centre and the Cholesky factor of its scale matrix (fixed at the
        end of warm-up; before, the first proposal's).
    log_weight
        The last draw's log weight (NaN during warm-up).
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("walker", "chol")

    walker: am.State
    mean: FloatArray
    chol: FloatArray
    log_weight: float


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    walker = am.init(position, params.walker, seed=seed, chain=chain)
    d = walker.position.size
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        walker=walker,
        mean=walker.position,
        chol=frozen_array(np.eye(d)),
        log_weight=math.nan,
    )


def _nu(params: Params) -> float:
    return math.inf if params.proposal == "gaussian" else float(params.dof)


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    if state.iteration < params.warmup:
        return am.ask(state.walker, params.walker)
    t = state.iteration + 1
    rng = generator(state.seed, state.chain, t, Stream.PROPOSE)
    z = rng.standard_normal(params.dim)
    step = matvec(state.chol, z)
    if params.proposal == "student_t":
        g = rng.standard_normal(params.dof)
        chi2 = dot(g, g)  # integer degrees: no special function, the same bits everywhere
        # x = mean + L z / sqrt(chi2 / nu); a chi-squared of 0 has probability 0.
        step = step * (math.sqrt(params.dof) / math.sqrt(max(chi2, 1e-300)))
    return Proposal(t, "proposal", frozen_array(state.mean + step))


def round_size(state: State, params: Params) -> int:
    """The rest of the chain's round (:mod:`core.populations.rounds`): after warm-up, the rest of
    its ``particles`` independent draws of the fixed proposal; in warm-up, one ``am``
    transition."""
    t = state.iteration + 1
    if t <= params.warmup:
        return 1
    r = params.particles
    return r - (t - params.warmup - 1) % r


def ask_ahead(state: State, params: Params, k: int) -> Proposal:
    """The proposal ``k`` evaluations after the outstanding one, within its round."""
    return ask(state.evolve(iteration=state.iteration + k), params)


def log_proposal(state: State, params: Params, x: FloatArray) -> float:
    """``log q(x)``, the chain's proposal's log density at ``x``. (Only reported, in the
    draws' log weights: nothing the chain draws depends on it.)"""
    return float(_log_proposals(state, params, np.asarray(x)[None, :])[0])


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    if state.logdensity is None or state.iteration < params.warmup:
        walker = state.walker
        if state.logdensity is None:  # the initial point, perhaps a new one (a reset)
            walker = walker.evolve(position=state.position, logdensity=None, epoch=state.epoch)
        walker, info = am.tell(walker, params.walker, proposal, logdensity)
        new = state.evolve(
            walker=walker,
            position=walker.position,
            logdensity=walker.logdensity,
            iteration=walker.iteration,
            accepted=walker.accepted,
        )
        if walker.logdensity is not None and walker.iteration == params.warmup:
            new = _fix_proposal(new, params)  # warm-up is over (at once, without one)
        return new, info
    check_tell(state, proposal, logdensity)
    t = proposal.iteration
    x = proposal.position
    log_w = -math.inf if logdensity == -math.inf else logdensity - log_proposal(state, params, x)
    new = state.evolve(
        position=x,
        logdensity=float(logdensity),
        iteration=t,
        accepted=state.accepted + (log_w != -math.inf),
        log_weight=log_w,
    )
    outcome: Literal["accepted", "rejected"] = "accepted" if log_w != -math.inf else "rejected"
    return new, StepInfo(t, outcome, 1.0, False)


def _fix_proposal(state: State, params: Params) -> State:
    """The proposal from the warm-up's last window: its states' mean and covariance
    (``am``'s proposal covariance without its scale, where the window is too short)."""
    walker = state.walker
    moments = walker.moments
    d = params.dim
    if moments.count >= 2:
        mean = np.asarray(moments.mean)
        cov = moments.covariance()
    else:
        mean = np.asarray(walker.position)
        cov = np.full((d, d), math.nan)
    if not usable_covariance(cov):
        walker_params = params.walker
        cov = am.proposal_covariance(walker, walker_params, estimate=False) / (
            exp1(walker.log_lambda) * 2.38 * 2.38 / d
        )
    cov = 0.5 * (cov + cov.T)
    nu = _nu(params)
    factor = params.inflation * ((nu - 2) / nu if nu > 2 else 1.0)
    try:
        chol = jittered_cholesky(factor * cov)
    except np.linalg.LinAlgError:
        chol = frozen_array(np.eye(d) * params.initial_scale)
    fixed: State = state.evolve(mean=frozen_array(mean), chol=frozen_array(chol))
    return fixed


def mixture_log_weights(
    states: Sequence[State], params: Params, draws: FloatArray, log_density: FloatArray
) -> FloatArray:
    """The log weights of ``draws`` (``(n, d)``, with their told ``log_density``) against
    the mixture of the chains' proposals ``states``, in equal shares (the chains draw
    equally many): the deterministic mixture weights, whose mean estimates the
    normalising constant without bias, and with a small variance wherever some chain's
    proposal covers the target. A draw where every proposal's density underflows (far
    in a tail) gets the largest finite weight, which the weights' diagnostics then see,
    rather than an infinite one."""
    x = np.asarray(draws, dtype=np.float64)
    lp = np.asarray(log_density, dtype=np.float64)
    per_chain = np.stack([_log_proposals(s, params, x) for s in states])
    per_chain = np.where(np.isnan(per_chain), -math.inf, per_chain)  # overflowed: 0
    top = per_chain.max(axis=0)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        mean = np.add.reduce(exp(per_chain - shift), axis=0) / per_chain.shape[0]
        log_mix = shift + log(mean)
        log_mix = np.maximum(np.nan_to_num(log_mix, nan=-math.inf), _LOG_FLOOR)
        out = np.where(lp == -math.inf, -math.inf, lp - log_mix)
    return np.asarray(out, dtype=np.float64)


#: The least log density a proposal mixture is taken to have (:func:`mixture_log_weights`).
_LOG_FLOOR = -1e300


def modes(states: Sequence[State]) -> list[list[int]]:
    """The chains grouped by the mode their proposals sit on: two chains share one when
    either's centre lies within 3 of the other's scales (the Mahalanobis distance under
    its scale matrix), joined transitively. Chains that found a mode no other chain did
    stand alone."""
    n = len(states)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if root(i) == root(j):
                continue
            near = False
            for a, b in ((states[i], states[j]), (states[j], states[i])):
                u = solve_lower_rows(a.chol, (np.asarray(b.mean) - np.asarray(a.mean))[None, :])
                near |= float(np.sqrt(np.add.reduce(u[0] * u[0]))) < 3.0
            if near:
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def _log_proposals(state: State, params: Params, x: FloatArray) -> FloatArray:
    """``log q(x)`` of one chain's proposal at each row of ``x`` (vectorised), with the
    same bits on every CPU (:mod:`core.numerics.arithmetic`): the log weights a replay
    gives are the first run's."""
    d = params.dim
    with np.errstate(over="ignore", invalid="ignore"):  # far tails: density 0
        u = solve_lower_rows(state.chol, x - state.mean)
        delta2 = np.add.reduce(u * u, axis=1)
    log_det = float(np.add.reduce(log(np.diagonal(state.chol))))
    if params.proposal == "gaussian":
        return np.asarray(-0.5 * delta2 - log_det - 0.5 * d * log1(2 * math.pi))
    nu = params.dof
    with np.errstate(over="ignore", invalid="ignore"):
        tail = log(1.0 + delta2 / nu)  # log1p: an absolute error of 1e-16 is immaterial here
    return np.asarray(
        _log_gamma_half(nu + d)
        - _log_gamma_half(nu)
        - 0.5 * d * log1(nu * math.pi)
        - log_det
        - 0.5 * (nu + d) * tail
    )


@functools.lru_cache(maxsize=256)
def _log_gamma_half(k: int) -> float:
    """``log Gamma(k / 2)`` for a positive integer ``k``, from ``Gamma(1) = 1``,
    ``Gamma(1 / 2) = sqrt(pi)`` and ``Gamma(z + 1) = z Gamma(z)``, with the portable
    ``log`` (``math.lgamma`` is the C library's, which may differ by CPU)."""
    z = 1.0 if k % 2 == 0 else 0.5
    total = 0.0 if k % 2 == 0 else 0.5 * log1(math.pi)
    while z < k / 2:
        total += log1(z)
        z += 1.0
    return total


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    warm-up's ``am`` chain, and the proposal's mean and factor."""
    return am.chain_floats(dim, params.walker) + 2 * dim + dim * dim + 10


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
    stats=("log_weight",),
    acceptance_checked=False,
    weighted=True,
    mixture_log_weights=mixture_log_weights,
    modes=modes,
    round_size=round_size,
    ask_ahead=ask_ahead,
)
