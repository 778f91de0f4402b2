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
    A frozen dataclass, a subclass of :class:`core.interface.chain.ChainState` (the fields every chain has),
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

What every chain's state and results are made of is in :mod:`core.interface.chain`;
what every sampler's ``ask`` and ``tell`` have in common is in
:mod:`core.interface.metropolis`: :func:`~core.interface.metropolis.metropolis_ask` hands
out the initial point and draws the proposal stream, and a sampler gives only its
proposal; :func:`~core.interface.metropolis.metropolis_tell` checks the told value,
accepts or rejects, and a sampler gives only its adaptation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from kameleon.core.interface.chain import FloatArray, P, Parts, Proposal, S, StepInfo
from kameleon.core.interface.metropolis import Adapt
from kameleon.core.interface.options import MakeParams, OptionError, params_parser, parse_params

__all__ = [
    "Evaluation",
    "MakeParams",
    "OptionError",
    "Sampler",
    "TellDraw",
    "TellGradient",
    "TellGradientMany",
    "TellParts",
    "params_parser",
    "parse_params",
    "takes_steps",
    "tell_one",
    "transition_stats",
]


# --------------------------------------------------------------------------- steps


TellGradient = Callable[[S, P, Proposal, float, FloatArray], tuple[S, StepInfo]]

TellGradientMany = Callable[
    [Sequence[S], P, Sequence[Proposal], Sequence[float], Sequence[FloatArray | None]],
    list[tuple[S, StepInfo]],
]
"""Many chains' ``tell_gradient`` at once: ``tell_gradient_many(states, params, proposals,
logdensities, gradients)``, the same results bit for bit (:func:`core.running.batch.tell_many`)."""
"""A gradient sampler's tell: ``tell_gradient(state, params, proposal, logdensity,
gradient)``."""


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
        A sampler that is :func:`core.interface.metropolis.metropolis_tell` with this adaptation, so that many
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
