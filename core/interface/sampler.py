"""The sampler interface shared by every algorithm in :mod:`core.samplers`.

A sampler is a module with the same names in each (BlackJAX style), gathered at its end
in a typed record, ``SAMPLER`` (:class:`Sampler`), which is what the registry
(:data:`core.SAMPLERS`), the runners and the service use; nothing is looked up by name:

``NAME``
    The registry name (``"rwm"``, ``"kameleon"``, ...).
``Params``
    A frozen dataclass of options with the fields ``dim`` and ``warmup``, which the
    session sets. Every other field has a documented default; the :func:`core.interface.options.parse_params`
    helper validates a plain mapping of options into it.
``State``
    A frozen dataclass, a subclass of :class:`ChainState` (the fields every chain has),
    that carries everything the next transition needs and nothing random: randomness
    comes from :func:`core.numerics.rng.generator`. Arrays in a state are read-only float64 numpy
    arrays; a new state never shares a writeable buffer with an old one.
``make_params(dim, options, *, warmup) -> Params``
    Validated options for a chain of dimension ``dim`` whose first ``warmup``
    iterations are warm-up. Unknown options raise :class:`OptionError`. Every sampler's
    is :func:`core.interface.options.params_parser` of its ``Params``.
``init(position, params, *, seed, chain) -> State``
    A chain waiting for its initial point to be evaluated.
``ask(state, params) -> Proposal``
    Everything before the log density is needed. Pure: the same state gives the
    same proposal.
``tell(state, params, proposal, logdensity) -> (State, StepInfo)``
    Everything after. Never mutates its inputs.
``chain_floats(dim, params) -> int``
    The floats one chain keeps and works with, at most (the memory budgets).
``SAMPLER``
    The record of the above, with the sampler's batched adaptation if it has one and
    what a told result must carry (:class:`Evaluation`).

The split is at the log-density call, so the log density can be evaluated anywhere:
in another process, another language, or as the log of an unbiased estimate
(pseudo-marginal MCMC). The current state's log density is cached in the state and
never asked for again; only proposals are evaluated.

What every sampler's ``ask`` and ``tell`` have in common is here: :func:`metropolis_ask`
hands out the initial point and draws the proposal stream, and a sampler gives only its
proposal; :func:`metropolis_tell` checks the told value, accepts or rejects, and a
sampler gives only its adaptation.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.options import MakeParams, OptionError, params_parser, parse_params
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.rng import Stream, generator

__all__ = [
    "Adapt",
    "ChainParams",
    "ChainState",
    "Evaluation",
    "FloatArray",
    "MakeParams",
    "OptionError",
    "Outcome",
    "Parts",
    "Proposal",
    "ProposalKind",
    "Propose",
    "Sampler",
    "StepInfo",
    "TellDraw",
    "TellGradient",
    "TellGradientMany",
    "TellParts",
    "accept_or_reject",
    "check_tell",
    "frozen_array",
    "metropolis_accept",
    "metropolis_ask",
    "metropolis_tell",
    "metropolis_transition",
    "new_chain_fields",
    "params_parser",
    "parse_params",
    "reset",
    "takes_steps",
    "tell_initial",
    "tell_one",
    "transition_stats",
]

FloatArray = npt.NDArray[np.float64]
Outcome = Literal["initialized", "outside_support", "accepted", "rejected", "step"]
"""What a tell did: ``"step"`` is an intermediate evaluation of a transition that needs
several (a leapfrog point of an HMC trajectory, a point of a gradient check): the chain
made no transition and records no draw."""
ProposalKind = Literal[
    "init", "proposal", "leapfrog", "gradient_check", "minibatch", "conditional", "tempered"
]


def frozen_array(values: Any) -> FloatArray:
    """A read-only float64 copy of ``values``."""
    arr = np.array(values, dtype=np.float64)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, slots=True)
class Proposal:
    """A point that a chain needs evaluated.

    Attributes
    ----------
    iteration
        The iteration this proposal belongs to; 0 is the chain's initial point.
    kind
        ``"init"`` for the initial point, ``"proposal"`` for a Metropolis-Hastings
        proposal (the last evaluation of a transition); a transition that needs several
        evaluations hands out the ones before its last as ``"leapfrog"`` (a point of a
        Hamiltonian trajectory) or ``"gradient_check"`` (a point of the finite-difference
        check of a told gradient); ``gibbs`` hands out each block's Metropolis-Hastings
        update as ``"proposal"`` (the outcome ``"step"`` says the sweep goes on), and a
        block that the client draws from its full conditional as ``"conditional"``, at
        the chain's current point (``block``, ``indices``); ``tempering`` hands out its
        hot rungs' proposals as ``"tempered"``.
    position
        The point, shape ``(dim,)``.
    log_correction
        Everything in the log acceptance ratio that is not the target, where it is
        known before the point is evaluated: for an asymmetric proposal
        ``log q(x | x*) - log q(x* | x)``, for the kernel samplers' surrogate HMC the
        change in the momentum's log density. Zero for symmetric proposals, and for
        the gradient samplers, whose corrections need the gradient at the point and are
        computed when it is told.
    step
        The evaluation's place in its transition, from 0: a transition's evaluations
        are handed out one at a time, each after the one before it is told. 0 for every
        proposal of a sampler that evaluates once per transition.
    minibatch
        The indices of the data points whose log likelihood is asked for, sorted
        (``sgld``, :class:`Evaluation` ``parts``); ``None`` for the whole target.
    block, indices
        For a ``"conditional"`` proposal (``gibbs``): the block whose coordinates the
        client draws from their full conditional, by its place in the sampler's blocks,
        and its coordinates (from 0, in the block's order); ``None`` otherwise.
    """

    iteration: int
    kind: ProposalKind
    position: FloatArray
    log_correction: float = 0.0
    step: int = 0
    minibatch: tuple[int, ...] | None = None
    block: int | None = None
    indices: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What one ``tell`` did; returned, never carried in the state."""

    iteration: int
    outcome: Outcome
    acceptance_probability: float
    is_warmup: bool


@dataclass(frozen=True, slots=True)
class ChainState:
    """The fields every sampler's ``State`` has: each ``State`` is a subclass that adds
    its own (see :func:`new_chain_fields` for a new chain's values)."""

    position: FloatArray
    logdensity: float | None  # None: the initial point is not evaluated yet
    iteration: int  # transitions done; draws recorded
    accepted: int  # accepted transitions
    epoch: int  # times a new initial point was set
    seed: int
    chain: int

    def evolve(self, **changes: Any) -> Any:
        """A copy with ``changes``: :func:`dataclasses.replace` without its checks (a
        sampler's state has no init-only fields, and one with a ``__post_init__`` goes
        through ``replace``), about twice as fast, which counts at every transition."""
        cls = type(self)
        fields = _FIELDS.get(cls)
        if fields is None:
            names = tuple(f.name for f in dataclasses.fields(self))
            fields = _FIELDS[cls] = (names, frozenset(names), operator.attrgetter(*names))
        names, known, values = fields
        if hasattr(cls, "__post_init__"):  # a state that checks itself: let it
            return dataclasses.replace(self, **changes)
        if not changes.keys() <= known:
            raise TypeError(f"{cls.__name__} has no field {sorted(changes.keys() - known)}")
        new = object.__new__(cls)
        set_field = object.__setattr__
        for name, value in zip(names, values(self), strict=True):  # all of them at once
            set_field(new, name, value)
        for name, value in changes.items():
            set_field(new, name, value)
        return new


_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str], Callable[[Any], tuple[Any, ...]]]] = {}


class ChainParams(Protocol):
    """What every sampler's ``Params`` has: the values the session fixes."""

    @property
    def dim(self) -> int: ...

    @property
    def warmup(self) -> int: ...


S = TypeVar("S", bound=ChainState)
P = TypeVar("P", bound=ChainParams)


# --------------------------------------------------------------------------- steps


def metropolis_accept(
    logdensity_new: float, logdensity_old: float, log_correction: float, uniform: float
) -> tuple[bool, float]:
    """Metropolis-Hastings decision in log space.

    Returns ``(is_accepted, acceptance_probability)`` with the probability clipped to
    ``min(1, alpha)``. ``-inf`` for the new point (outside the support) always rejects,
    and so does a ratio that is not a number: a proposal whose correction the arithmetic
    could not give (a chain near the float range, on an improper target), or log
    densities near the float range whose difference overflows against an infinite
    correction.
    """
    if logdensity_new == -math.inf:
        return False, 0.0
    log_alpha = float(logdensity_new) - float(logdensity_old) + float(log_correction)
    if math.isnan(log_alpha):
        return False, 0.0
    log_alpha = min(0.0, log_alpha)
    return bool(log1(uniform) < log_alpha), exp1(log_alpha)


Propose = Callable[[S, P, np.random.Generator], tuple[npt.ArrayLike, float]]
"""A sampler's proposal ``propose(state, params, rng) -> (position, log_correction)``
from a state whose log density is known, with ``rng`` its proposal stream."""

Adapt = Callable[[S, S, P, Proposal, StepInfo, float], S]
"""A sampler's adaptation after an accept/reject step,
``adapt(old, new, params, proposal, info, u_adapt) -> new``: ``old`` is the state told,
``new`` the state after the step (:func:`metropolis_transition`), ``u_adapt`` a uniform
of the accept stream for the adaptation coin."""


TellGradient = Callable[[S, P, Proposal, float, FloatArray], tuple[S, StepInfo]]

TellGradientMany = Callable[
    [Sequence[S], P, Sequence[Proposal], Sequence[float], Sequence[FloatArray | None]],
    list[tuple[S, StepInfo]],
]
"""Many chains' ``tell_gradient`` at once: ``tell_gradient_many(states, params, proposals,
logdensities, gradients)``, the same results bit for bit (:func:`core.running.batch.tell_many`)."""
"""A gradient sampler's tell: ``tell_gradient(state, params, proposal, logdensity,
gradient)``."""


@dataclass(frozen=True, slots=True)
class Parts:
    """A target told in parts, at a point and for a minibatch of data (``sgld``).

    Attributes
    ----------
    log_prior
        The log prior density at the point (``-inf``: outside the support).
    log_likelihood
        The minibatch's log likelihood: the sum over its data points, not scaled.
    prior_gradient
        The log prior's gradient at the point, shape ``(dim,)``.
    likelihood_gradient
        The minibatch log likelihood's gradient (the sum over its points), ``(dim,)``.
    """

    log_prior: float
    log_likelihood: float
    prior_gradient: FloatArray
    likelihood_gradient: FloatArray


TellParts = Callable[[S, P, Proposal, Parts], tuple[S, StepInfo]]
"""A minibatch sampler's tell: ``tell_parts(state, params, proposal, parts)``."""

TellDraw = Callable[[S, P, Proposal, float, FloatArray | None], tuple[S, StepInfo]]
"""The tell of a sampler some of whose evaluations are the client's draws from a full
conditional (``gibbs``): ``tell_draw(state, params, proposal, logdensity, draw)``, with
``draw`` the drawn block's values for a ``"conditional"`` proposal and ``None`` for
every other."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a told result must carry for a sampler, beside its log density.

    Attributes
    ----------
    gradient
        The log density's gradient at the point, which the sampler's transitions use:
        its record then has ``tell_gradient``.
    parts
        The target in parts (:class:`Parts`): the log prior and a minibatch's log
        likelihood, each with its gradient; its record then has ``tell_parts``.
    draw
        At ``"conditional"`` proposals, the client's draw of a block from its full
        conditional, with the log density at the point it makes (``gibbs``); its record
        then has ``tell_draw`` and ``conditional_indices``.
    """

    gradient: bool = False
    parts: bool = False
    draw: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampler(Generic[S, P]):
    """An algorithm, as the registry (:data:`core.SAMPLERS`), the runners and the service
    know it: its module's parts (see the module docstring), typed, with what they need
    to know beyond ask and tell.

    Attributes
    ----------
    name
        The registry name (``"am"``, ``"kameleon"``, ...).
    Params, State
        Its options' and its chains' frozen dataclasses.
    make_params, init, ask, tell
        The ask/tell interface.
    ask_many
        ``ask_many(states, params)``: many chains' ``ask`` in one call, the same
        proposals bit for bit, which :func:`core.running.batch.ask_many` uses when the sampler
        has it (``nuts``: its chains' leapfrog points as arrays); ``None``: chain by chain.
    chain_floats
        ``chain_floats(dim, params)``: the floats one chain keeps and works with, at most
        (:mod:`core.interface.memory` turns them into bytes, for the budgets).
    metropolis_adapt
        A sampler that is :func:`metropolis_tell` with this adaptation, so that many
        chains' accept decisions can be drawn at once (:func:`core.running.batch.tell_many`);
        ``None``: each chain is told through ``tell``.
    evaluation
        What a told result must carry (:class:`Evaluation`).
    acceptance_checked
        Whether the acceptance-rate warnings (``acceptance_low``, ``acceptance_high``)
        apply: a Metropolis-Hastings proposal is tuned toward an acceptance rate, but a
        NUTS transition draws from its whole trajectory and moves almost always.
    stats
        Per-transition statistics recorded with each draw, as the names of ``State``
        fields that hold the last transition's (as Stan records them: ``step_size``,
        ``tree_depth``, ``n_steps``, ``diverging``, ``energy``); read by
        :func:`transition_stats`.
    tell_gradient
        ``tell_gradient(state, params, proposal, logdensity, gradient)``: ``tell`` for a
        sampler that needs the gradient at each point (``evaluation.gradient``), which
        its ``tell`` then refuses to go without. :func:`tell_one` picks the one to call.
    tell_gradient_many
        ``tell_gradient_many(states, params, proposals, logdensities, gradients)``: many
        chains' ``tell_gradient`` in one call, the same results bit for bit, which
        :func:`core.running.batch.tell_many` uses when the sampler has it (``nuts``: its chains'
        leapfrog arithmetic as arrays); ``None``: chain by chain.
    tell_parts
        ``tell_parts(state, params, proposal, parts)``: ``tell`` for a sampler told its
        target in parts (``evaluation.parts``, :class:`Parts`).
    parts_value
        ``parts_value(params, parts)``: the value that told parts stand for, recorded as
        the told log density (``sgld``: ``log_prior + (N / n) log_likelihood``).
    weighted
        Whether the draws are importance samples, each with its log weight recorded as
        the statistic ``log_weight`` (``importance``): their diagnostics are the
        weights' (:mod:`core.diagnostics.assess`), not a Markov chain's.
    mixture_log_weights
        ``mixture_log_weights(states, params, draws, log_density)``: for a weighted
        sampler, the log weights of draws against the mixture of the chains'
        proposals, from their final ``states``.
    modes
        ``modes(states)``: for a weighted sampler, the chains grouped by the mode their
        proposals found (:func:`core.diagnostics.assess.mode_findings`).
    multistep
        Whether a transition may take several evaluations, each its ``step``, without
        gradients (``gibbs``: one per block update; ``tempering``: one per rung); a sampler with ``tell_gradient``
        may always (:func:`takes_steps`).
    tell_draw
        ``tell_draw(state, params, proposal, logdensity, draw)``: ``tell`` for a sampler
        told the client's draws at its ``"conditional"`` proposals (``evaluation.draw``).
    conditional_indices
        ``conditional_indices(params, step)``: the coordinates that the evaluation at
        ``step`` of a transition (from 0) asks the client to draw, or ``None`` for an
        evaluation that draws nothing; so that a told draw is checked before it is given
        to the sampler.
    told_record
        ``told_record(state, params, iteration, step)``: the value and draw (``None``
        for a point evaluated without one) told for an evaluation of a multistep
        transition that ``state`` remembers, or ``None``: a retried result is then
        compared with it (a different value or draw is refused); without a record, a
        retry of an evaluation applied before is a duplicate whatever its value.
    ensemble_size
        ``ensemble_size(params)``: for a sampler whose chain is an ensemble of walkers
        updated in turn (``ensemble``; ``smc``'s population of particles), the walkers
        ``W``: iteration ``t`` records walker ``t mod W``, and the assessment judges the
        draws as ``W`` interleaved walkers (:mod:`core.diagnostics.autocorr`; ``smc``'s as a
        population, ``population``).
        ``None``: the draws are one chain's.
    population
        ``population(params)``: for an ensemble whose walkers are a population that
        starts, after warm-up, as a sample of the target (``smc``'s particles after the
        tempering), the factor ``kappa`` by which its resampling inflates the variance of
        what its particles keep through the run (the mode each sits in) over that of
        independent particles. The assessment then reads each chain's population as a
        whole, not each walker as a chain (:mod:`core.diagnostics.population`). ``None``: the
        walkers are read as chains.
    needs_parts
        ``needs_parts(params)``: whether, with these options, every told result must give
        the log prior and the log likelihood apart (:class:`Parts`, without gradients),
        which ``tell_parts`` then receives; a result told in parts to a sampler that does
        not need them still goes to its ``tell_parts`` when it has one. ``None``: never.
    pseudo_marginal_refusal
        ``pseudo_marginal_refusal(params)``: why, with these options, the sampler needs
        the density itself and not an unbiased estimate of it (``tempering`` raises it to
        powers, and a power of an unbiased estimate is not an unbiased estimate of the
        power; ``gibbs``'s conditional blocks are exact full conditionals), or ``None``
        when an estimate will do: the service then refuses ``pseudo_marginal`` with it.
    round_size
        ``round_size(state, params)``: for a sampler whose next few evaluations do not
        depend on one another's told values (an ensemble's half-step, a population's
        sweep, a ladder's rungs, independent draws), how many of them, from the
        outstanding one on, ``ask_ahead`` can give now: the rest of the chain's *round*,
        at least 1 (:mod:`core.populations.rounds`). ``None``: a round is one evaluation.
    ask_ahead
        ``ask_ahead(state, params, k)``: the proposal ``k`` evaluations after the
        outstanding one (``0 <= k < round_size``): what ``ask`` gives once the ``k``
        before it are told, whatever their values (``tests/core/test_rounds.py``).
    chain_evidence
        ``chain_evidence(states, params) -> (evidence, findings)``: for a Markov chain
        sampler that estimates the evidence in its chains' states (``tempering``, ``smc``), the
        :class:`core.populations.evidence.Evidence` (``None`` before there is one) and its warnings
        (:class:`core.diagnostics.findings.Finding`), which :func:`core.diagnostics.assess.assess` reports.
    """

    name: str
    Params: type[P]
    State: type[S]
    make_params: MakeParams[P]
    init: Callable[..., S]
    ask: Callable[[S, P], Proposal]
    ask_many: Callable[[Sequence[S], P], list[Proposal]] | None = None
    tell: Callable[[S, P, Proposal, float], tuple[S, StepInfo]]
    chain_floats: Callable[[int, P], int]
    metropolis_adapt: Adapt[S, P] | None = None
    evaluation: Evaluation = Evaluation()
    tell_gradient: TellGradient[S, P] | None = None
    tell_gradient_many: TellGradientMany[S, P] | None = None
    tell_parts: TellParts[S, P] | None = None
    parts_value: Callable[[P, Parts], float] | None = None
    stats: tuple[str, ...] = ()
    acceptance_checked: bool = True
    weighted: bool = False
    mixture_log_weights: Callable[[Sequence[S], P, FloatArray, FloatArray], FloatArray] | None = (
        None
    )
    modes: Callable[[Sequence[S]], list[list[int]]] | None = None
    multistep: bool = False
    tell_draw: TellDraw[S, P] | None = None
    conditional_indices: Callable[[P, int], tuple[int, ...] | None] | None = None
    told_record: Callable[[S, P, int, int], tuple[float, FloatArray | None] | None] | None = None
    ensemble_size: Callable[[P], int] | None = None
    population: Callable[[P], float] | None = None

    needs_parts: Callable[[P], bool] | None = None
    pseudo_marginal_refusal: Callable[[P], str | None] | None = None
    chain_evidence: Callable[[Sequence[S], P], tuple[Any, list[Any]]] | None = None
    round_size: Callable[[S, P], int] | None = None
    ask_ahead: Callable[[S, P, int], Proposal] | None = None


def takes_steps(sampler: Sampler[Any, Any]) -> bool:
    """Whether ``sampler``'s transitions may take several evaluations, each handed out
    with its ``step`` after the one before it is told."""
    return sampler.multistep or sampler.tell_gradient is not None


def transition_stats(sampler: Sampler[Any, Any], state: Any) -> tuple[float, ...]:
    """The values of ``sampler.stats`` in ``state``, after a transition, as floats."""
    return tuple(float(getattr(state, name)) for name in sampler.stats)


def tell_one(
    sampler: Sampler[S, P],
    state: S,
    params: P,
    proposal: Proposal,
    logdensity: float,
    gradient: FloatArray | None = None,
    parts: Parts | None = None,
    draw: FloatArray | None = None,
) -> tuple[S, StepInfo]:
    """A told result given to ``sampler``: ``tell``, ``tell_gradient`` with the
    gradient for a sampler that needs one, ``tell_parts`` with the target's parts for
    one told them, or ``tell_draw`` with the client's draw (or ``None``) for one told
    draws (a ``ValueError`` when what it needs is missing)."""
    if sampler.tell_draw is not None:
        return sampler.tell_draw(state, params, proposal, logdensity, draw)
    if draw is not None:
        raise ValueError(f"{sampler.name} asks for no draws")
    if sampler.tell_parts is not None and (parts is not None or sampler.evaluation.parts):
        if parts is None:
            raise ValueError(
                f"{sampler.name} needs the log prior and the minibatch's log likelihood, "
                "each with its gradient, at every point"
            )
        return sampler.tell_parts(state, params, proposal, parts)
    if sampler.tell_gradient is None:
        return sampler.tell(state, params, proposal, logdensity)
    if gradient is None:
        raise ValueError(f"{sampler.name} needs the gradient of the log density at every point")
    return sampler.tell_gradient(state, params, proposal, logdensity, gradient)


def metropolis_ask(state: S, params: P, propose: Propose[S, P]) -> Proposal:
    """The ``ask`` every sampler shares: the initial point while it is not evaluated,
    else ``propose``'s point for the next iteration, drawn from that iteration's
    proposal stream (:class:`core.numerics.rng.Stream`)."""
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    position, log_correction = propose(
        state, params, generator(state.seed, state.chain, t, Stream.PROPOSE)
    )
    point = frozen_array(position)
    if not np.isfinite(point).all():
        # The proposal's arithmetic overflowed (a chain drifting far out on an improper
        # target, an HMC trajectory blown up): propose staying put instead. Staying put
        # leaves any target invariant, so the kernel (a mixture of the two, chosen by
        # the overflow) does too; and no client is handed a point it cannot evaluate.
        return Proposal(t, "proposal", state.position, 0.0)
    return Proposal(t, "proposal", point, log_correction)


def metropolis_tell(
    state: S, params: P, proposal: Proposal, logdensity: float, adapt: Adapt[S, P]
) -> tuple[S, StepInfo]:
    """The ``tell`` every sampler shares: :func:`metropolis_transition`, then, for a
    proposal (not the initial point), ``adapt``."""
    new, info, u_adapt = metropolis_transition(state, proposal, logdensity, warmup=params.warmup)
    if proposal.kind == "init":
        return new, info
    return adapt(state, new, params, proposal, info, u_adapt), info


def new_chain_fields(position: Any, *, seed: int, chain: int) -> dict[str, Any]:
    """The :class:`ChainState` fields of a chain waiting for its initial point to be
    evaluated; a sampler's ``init`` adds its own fields."""
    return {
        "position": frozen_array(position),
        "logdensity": None,
        "iteration": 0,
        "accepted": 0,
        "epoch": 0,
        "seed": seed,
        "chain": chain,
    }


def metropolis_transition(
    state: Any, proposal: Proposal, logdensity: float, *, warmup: int
) -> tuple[Any, StepInfo, float]:
    """The part of ``tell`` that every Metropolis-Hastings sampler shares.

    Checks that ``proposal`` is the one ``state`` waits for; for the initial point,
    applies :func:`tell_initial`; otherwise accepts or rejects with the accept stream's
    first uniform and advances the common fields (``position``, ``logdensity``,
    ``iteration``, ``accepted``). Returns the new state, what happened, and a second
    uniform of the accept stream for the caller's adaptation coin (1.0 for the initial
    point, which never adapts).
    """
    check_tell(state, proposal, logdensity)
    if proposal.kind == "init":
        new, info = tell_initial(state, proposal, logdensity)
        return new, info, 1.0
    u_accept, u_adapt = generator(
        state.seed, state.chain, proposal.iteration, Stream.ACCEPT
    ).random(2)
    new, info = accept_or_reject(state, proposal, logdensity, float(u_accept), warmup=warmup)
    return new, info, float(u_adapt)


def accept_or_reject(
    state: Any, proposal: Proposal, logdensity: float, u_accept: float, *, warmup: int
) -> tuple[Any, StepInfo]:
    """The Metropolis-Hastings step of :func:`metropolis_transition` for a checked
    ``proposal``, given the first uniform of its accept stream."""
    t = proposal.iteration
    accepted, prob = metropolis_accept(
        logdensity, state.logdensity, proposal.log_correction, u_accept
    )
    new = state.evolve(
        position=proposal.position if accepted else state.position,
        logdensity=float(logdensity) if accepted else state.logdensity,
        iteration=t,
        accepted=state.accepted + accepted,
    )
    info = StepInfo(t, "accepted" if accepted else "rejected", prob, t <= warmup)
    return new, info


def tell_initial(state: Any, proposal: Proposal, logdensity: float) -> tuple[Any, StepInfo]:
    """The shared ``tell`` for a chain's initial point.

    A finite log density sets the chain's current state. ``-inf`` leaves the state as
    it was: the chain waits for a new initial point (:func:`reset`).
    """
    if logdensity == -math.inf:
        return state, StepInfo(state.iteration, "outside_support", 0.0, True)
    return (
        dataclasses.replace(state, logdensity=float(logdensity)),
        StepInfo(state.iteration, "initialized", 1.0, True),
    )


def reset(state: Any, position: Any) -> Any:
    """Give a chain a new initial point; its adaptation is kept, its epoch bumped."""
    pos = frozen_array(position)
    if pos.shape != state.position.shape:
        raise ValueError(f"position must have shape {state.position.shape}")
    return dataclasses.replace(state, position=pos, logdensity=None, epoch=state.epoch + 1)


def check_tell(state: Any, proposal: Proposal, logdensity: float) -> None:
    """Raise ``ValueError`` unless ``proposal`` is the one ``state`` is waiting for."""
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    expected_kind = "init" if state.logdensity is None else "proposal"
    expected_iteration = state.iteration if state.logdensity is None else state.iteration + 1
    if proposal.kind != expected_kind or proposal.iteration != expected_iteration:
        raise ValueError("proposal does not belong to this state")
