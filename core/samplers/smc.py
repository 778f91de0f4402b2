"""Sequential Monte Carlo with adaptive tempering, one particle's evaluation per
transition, and the log evidence from the stages' incremental weights.

Each chain is an SMC sampler over a population of ``N`` particles (``particles``), from
the reference distribution to the target along inverse temperatures
``0 = beta_0 < beta_1 < ... < beta_S = 1``, with ``tempering``'s tempered targets
``pi_beta ∝ exp(a + beta l)`` (:mod:`core.samplers.tempering`, its two modes):

- ``tempered: "reference"`` (default): the results tell ``log pi``; ``a`` is the
  reference Gaussian ``N(reference_mean, reference_sd^2 I)``'s log density and
  ``l = log pi - log ref``.
- ``tempered: "likelihood"``: the results tell ``log_prior`` and ``log_likelihood``
  apart; ``a`` is the log prior and ``l`` the log likelihood.

**Start.** The chain's initial point is one ``"init"`` evaluation (the chain's position
until a particle is told). Then the particles are drawn from the reference Gaussian
(its ``SETUP`` stream) and evaluated one per transition: iteration ``t = 1 .. N``
evaluates particle ``t mod N``. In the reference mode they are exact draws from
``pi_0``. In the likelihood mode the prior cannot be drawn from without the client, so
they start from the reference Gaussian too, and the stages first cross a bridge from
the reference to the prior, ``ref^(1 - alpha) prior^alpha`` with ``alpha`` from 0 to 1
and ``beta = 0`` (:func:`_bridge`): steps in ``alpha`` chosen as those in ``beta`` are,
with incremental weights ``exp(delta (log prior - log ref))``, and moves in between.
When the whole bridge keeps the effective sample size (a reference that covers the
prior), it is crossed at once at the first stage: the particles are weighed
``prior / ref``. Either way the evidence includes the prior's normaliser, and a
reference that covers the prior poorly still warns (the weights ``prior / ref`` would
rest on a few particles, and the bridge's are as heavy).

**A stage** at ``beta`` moves every particle by random-walk Metropolis for
``pi_beta``; each move is one transition and one evaluation (kind ``"proposal"``),
iteration ``t`` moving particle ``t mod N``, in sweeps of ``N`` transitions: ``moves``
sweeps at least, then, while ``beta < 1``, until the particles have made ``mixing d``
accepted moves each on average or ``max_moves`` sweeps were made
(:func:`accepted_moves`; a random walk mixes slower the more dimensions it has, and a
population that its moves did not mix gives a biased evidence). The proposal is Gaussian with covariance
``lambda (2.38^2 / d) (Sigma + nugget I)``, ``Sigma`` the weighted covariance of the
population when the stage began and ``log lambda`` moved by
``2 (acceptance - target_acceptance)`` of the stage before, or further down when that
acceptance collapsed (:func:`scale_step`; both fixed within a stage).
The stage ends inside the ``tell`` of its last move (no evaluation): the next
``beta' = beta + delta`` is chosen by bisection so that the conditional effective sample
size of the incremental weights ``w_i = exp(delta l_i)``,
``N (sum W_i w_i)^2 / sum W_i w_i^2`` (Zhou, Johansen and Aston 2016; ``W`` the
normalised weights), is ``ess_fraction * N`` (or ``beta' = 1`` when that keeps it
above); ``log sum_i W_i w_i`` is added to the chain's log evidence; then the population
is resampled systematically with one uniform of the transition's ``MIX`` stream, and
its weights are equal again. There are no moves at ``beta_0``: the starting
evaluations end a stage of their own.

**Waste-free stages** (``waste_free``: ``P``; Dau and Chopin 2022, "Waste-free
sequential Monte Carlo"). A stage's end resamples ``M = N / P`` ancestors (systematic
resampling with ``M`` points), ancestor ``j`` at particle ``j P``; the stage's moves are
then ``P - 1`` steps of the ``M`` chains, step ``s`` moving chain ``j`` from particle
``j P + s - 1`` to particle ``j P + s`` (the proposal's point if accepted, else a copy
of the one it moved from), ``M`` transitions a step (a round), ``N - M`` a stage; and
all ``N`` states, the ancestors included, are weighed at the next stage's end. The
chains' states are not independent, so a stage's conditional effective sample size
overstates what its population holds; the evidence is still the product of the stages'
mean incremental weights over all ``N`` (an unbiased estimate for fixed temperatures:
the ``M`` chains are a standard SMC sampler's ``M`` particles on the space of paths of
length ``P``), and its error comes from the chains' spread
(:mod:`core.populations.smc_evidence`), which the correlation within a population does not bias.
After the tempering reaches ``beta = 1`` its stage's chains run once more, and the
warm-up's further moves at ``beta = 1`` are every particle's, as without the option; a
stage's end at the last warm-up transition resamples ``N``.

**Warm-up is the tempering.** The sequence should reach ``beta = 1`` within the
session's warm-up; the warm-up's remaining transitions move the population at
``beta = 1``, adapting the proposal at every stage's end. If ``beta < 1`` at the last
warm-up transition, that transition ends the stage with ``beta' = 1`` whatever the
effective sample size; when that step takes the conditional effective sample size
below ``ess_fraction`` (it skipped stages), the chain is marked unfinished: the
``smc_unfinished`` warning, and its evidence is unreliable (a warm-up shorter than the starting
evaluations, ``N``, ends the tempering at iteration ``N``, after warm-up: the draws
before are the reference's). After warm-up nothing adapts or resamples: every particle
is an exact random-walk Metropolis chain for the target, with a fixed proposal, and the
chain's draw at iteration ``t`` is particle ``t mod N``'s state after its move (the
record's ``ensemble_size``). The assessment reads each chain's population as a whole
(the record's ``population``, :mod:`core.diagnostics.population`): a particle need not mix on its
own, and on separated modes never leaves the one it sits in, while the population
carries each mode with its weight; R-hat compares the chains' populations.

**The evidence** ``Z = ∫ exp(a + l)`` (the reference integrates to 1; in the likelihood
mode the prior's normaliser times the marginal likelihood): each chain's estimate is the
sum of its stages' ``log sum W w`` (in the likelihood mode with the starting weights'
``log mean w``), the log of an estimate of ``Z`` that is unbiased for fixed
temperatures and a fixed proposal (the adaptive ones, chosen from the same particles,
add a bias: the proposal's covariance, estimated from the population it then moves,
keeps a population that is by chance too narrow narrow, and raised the waste-free
stages' evidence by 0.15 to 0.65 in 10 dimensions, BENCHMARKS.md section 12).
:func:`core.populations.smc_evidence.chain_evidence` takes the log of the mean of the chains' ``Z``,
and its standard error by the delta method. The mean of the chains' ``log Z`` would be biased low by about
half a chain's variance of ``log Z``; the log of their mean is biased low by
``1 / chains`` of it. A chain's variance of ``log Z`` is small when its moves mix the
population well at every stage, and grows fast when they do not (a population whose
covariance spans separated modes, too few moves for the dimension): chains whose
estimates disagree so much that a few of them carry the mean warn
``evidence_unreliable`` (:mod:`core.populations.smc_evidence`). The arithmetic of the weights
(the conditional effective sample size, the next step by bisection, systematic
resampling) is :mod:`core.populations.annealing`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Outcome,
    Parts,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics import matrices
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import matvec
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.populations.annealing import (
    conditional_ess,
    increment,
    log_mean_exp,
    next_delta,
    normalised,
    systematic_resample,
)
from kameleon.core.populations.smc_evidence import evidence_of
from kameleon.core.populations.tempered import (
    log_reference,
    parts_value,
    pseudo_marginal_refusal,
    reference_split,
    split_parts,
)
from kameleon.core.tuning.adaptation import usable_covariance

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "accepted_moves",
    "ask",
    "ask_ahead",
    "chain_floats",
    "init",
    "make_params",
    "population_inflation",
    "round_size",
    "scale_step",
    "tell",
    "tell_parts",
]

NAME = "smc"


@dataclass(frozen=True, slots=True)
class Params:
    """Options of sequential Monte Carlo.

    Attributes
    ----------
    particles
        ``N``, the particles of each chain's population (default 32; 4 to 4096). The
        starting evaluations are ``N`` transitions, and a stage ``N * moves``.
    moves
        Random-walk Metropolis moves of every particle per stage, at least (default 3;
        1 to 100).
    mixing, max_moves
        While ``beta < 1``, a stage's moves go on, a sweep of every particle at a time,
        until each particle has made ``mixing d`` accepted moves on average (the sum of
        the moves' acceptance probabilities; default 0.5, so 2.5 in 5 dimensions: about
        10 moves at the target acceptance; 0 to 10, 0: ``moves`` sweeps and no more),
        or ``max_moves`` sweeps (default 60; ``moves`` to 1000). A random walk needs more
        moves to mix the more dimensions it has; a population the moves did not mix
        weighs the next stage from too few distinct points, and its evidence is biased
        (on a 10-d Gaussian, upward, by more than its reported error).
    ess_fraction
        The conditional effective sample size, as a fraction of ``N``, that each stage's
        next inverse temperature keeps (default 0.5; in ``(0, 1)``). Higher: more,
        smaller stages.
    waste_free
        ``P``, the length of waste-free SMC's chains (Dau and Chopin 2022); default 0:
        off, the stages' moves as ``moves`` and ``mixing`` say. With ``P`` (from 2 to
        ``N / 2``, dividing ``N``), each stage of the tempering resamples ``M = N / P``
        ancestors instead of ``N`` particles and runs each through ``P - 1``
        random-walk Metropolis moves, and all ``N`` states of the ``M`` chains, the
        ancestors included, are the next stage's particles: a stage costs ``N - M``
        evaluations, whatever ``moves``, ``mixing`` and ``max_moves`` (which then apply
        only to the warm-up's moves at ``beta = 1``). Longer chains: fewer, more
        diverse ancestors' worth of mixing per stage; shorter: more ancestors.
    tempered
        ``"reference"`` (default) or ``"likelihood"``: ``tempering``'s modes.
    reference_mean, reference_sd
        The reference Gaussian ``N(reference_mean, reference_sd^2 I)`` that the
        particles start from (default mean 0 and sd 2, as ``tempering``'s).
    nugget
        Added to the diagonal of the population's covariance before it is factored
        (default ``1e-9``; positive).
    target_acceptance
        The moves' acceptance that the proposal's scale is moved toward between stages
        (default 0.25).
    """

    dim: int
    warmup: int
    particles: int = 32
    moves: int = 3
    mixing: float = 0.5
    max_moves: int = 60
    ess_fraction: float = 0.5
    waste_free: int = 0
    tempered: Literal["reference", "likelihood"] = "reference"
    reference_mean: float = 0.0
    reference_sd: float = 2.0
    nugget: float = 1e-9
    target_acceptance: float = 0.25

    def __post_init__(self) -> None:
        if not 4 <= self.particles <= 4096:
            raise OptionError("particles", "must be an integer from 4 to 4096")
        if not 1 <= self.moves <= 100:
            raise OptionError("moves", "must be an integer from 1 to 100")
        if not (0 <= self.mixing <= 10):
            raise OptionError("mixing", "must be from 0 to 10")
        if not self.moves <= self.max_moves <= 1000:
            raise OptionError("max_moves", "must be an integer from moves to 1000")
        if not 0 < self.ess_fraction < 1:
            raise OptionError("ess_fraction", "must be in (0, 1)")
        if self.waste_free and not (
            2 <= self.waste_free <= self.particles // 2 and self.particles % self.waste_free == 0
        ):
            raise OptionError(
                "waste_free", "must be 0 (off) or an integer from 2 to particles / 2 dividing it"
            )
        if not (self.reference_sd > 0 and math.isfinite(self.reference_sd)):
            raise OptionError("reference_sd", "must be positive and finite")
        if not math.isfinite(self.reference_mean):
            raise OptionError("reference_mean", "must be finite")
        if not (self.nugget > 0 and math.isfinite(self.nugget)):
            raise OptionError("nugget", "must be positive and finite")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")


@register("smc.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A chain of sequential Monte Carlo: its common fields are the last particle told
    (the initial point's before).

    Attributes
    ----------
    loglik
        ``l`` at the chain's position.
    particles
        The population, ``(N, dim)``.
    values, logliks
        The told value ``a + l`` and ``l`` of each particle (``-inf``: outside the
        support), ``(N,)``; NaN before it is evaluated.
    log_weights
        The particles' log weights (zero after a resampling), ``(N,)``.
    beta
        The current inverse temperature.
    stages
        Stages ended (resamplings).
    stage_moves, stage_accept
        Moves made in the current stage, and the sum of their acceptance probabilities.
    log_evidence
        The sum of the ended stages' ``log sum W w``.
    min_ess
        The smallest effective sample size (in particles) of the population's weights:
        a stage's conditional one, or the starting weights' (``prior / reference`` in
        the likelihood mode; ``N`` in the reference mode, whose particles are exact
        draws).
    unfinished
        Whether warm-up ended before the tempering reached ``beta = 1``.
    forced_from
        The ``beta`` the tempering had reached when warm-up ended and forced the step
        to 1 (1 when it was not forced; 0 on the bridge to the prior).
    log_scale, factor
        The proposal's ``log lambda`` and the Cholesky factor of the population's
        covariance plus the nugget, ``(dim, dim)``.
    acceptance, stage_acceptance
        The last move's acceptance probability, and the mean of the last ended stage's.
    mixed
        The least of the tempering's stages' accepted moves per particle and dimension
        (:func:`accepted_moves`); for a waste-free stage, per chain of ``P`` states and
        dimension (:func:`chain_moves`).
    alpha
        The bridge's power of the prior against the reference, ``pi = ref^(1 - alpha)
        prior^alpha L^beta`` (the likelihood mode; 1 once the bridge is crossed, and in
        the reference mode, whose ``a`` is the reference).
    wf_start
        The iteration whose ``tell`` began the current stage's waste-free chains (the
        stage's resampling of ``M`` ancestors), or -1 when the stage's moves are not
        waste-free: their move ``m = t - wf_start - 1`` is step ``s = 1 + m // M`` of
        chain ``j = m mod M``, from particle ``j P + s - 1`` to particle ``j P + s``.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("factor",)

    loglik: float
    particles: FloatArray
    values: FloatArray
    logliks: FloatArray
    log_weights: FloatArray
    beta: float
    stages: int
    stage_moves: int
    stage_accept: float
    log_evidence: float
    min_ess: float
    unfinished: bool
    log_scale: float
    factor: FloatArray
    acceptance: float
    stage_acceptance: float
    alpha: float = 1.0
    mixed: float = math.inf
    forced_from: float = 1.0
    wf_start: int = -1


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    fields = new_chain_fields(position, seed=seed, chain=chain)
    n, d = params.particles, params.dim
    s = params.reference_sd
    return State(
        **fields,
        loglik=math.nan,
        particles=frozen_array(np.tile(fields["position"], (n, 1))),
        values=frozen_array(np.full(n, math.nan)),
        logliks=frozen_array(np.full(n, math.nan)),
        log_weights=frozen_array(np.zeros(n)),
        beta=0.0,
        stages=0,
        stage_moves=0,
        stage_accept=0.0,
        log_evidence=0.0,
        min_ess=float(n),
        unfinished=False,
        log_scale=0.0,
        factor=frozen_array(s * np.eye(d)),
        acceptance=math.nan,
        stage_acceptance=math.nan,
        alpha=0.0 if params.tempered == "likelihood" else 1.0,
    )


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    n = params.particles
    k = t % n
    if t <= n:  # a particle's starting point
        return Proposal(t, "proposal", state.particles[k])
    move = _waste_free_move(state, params, t)
    current = np.asarray(state.particles[k if move is None else move[1]])
    z = generator(state.seed, state.chain, t, Stream.PROPOSE).standard_normal(params.dim)
    point = current + matvec(proposal_factor(state, params), z)
    if not np.all(np.isfinite(point)):
        point = current  # an overflow: propose staying put (the kernel stays exact)
    return Proposal(t, "proposal", frozen_array(point))


def round_size(state: State, params: Params) -> int:
    """The rest of the chain's round (:mod:`core.populations.rounds`): the rest of the sweep (each
    particle moves on its own, with the stage's proposal; a stage ends only at a
    sweep's end), and in warm-up not past its last transition (which may end a stage).
    In a waste-free stage, the rest of its chains' step (the ``M`` chains' moves at one
    step read the step before's particles only; a stage ends at a step's end); with
    ``waste_free``, a warm-up stage at ``beta = 1`` need not begin at a sweep's start,
    and the round ends with it too."""
    t = state.iteration + 1
    n = params.particles
    end = -(-t // n) * n
    if _waste_free_move(state, params, t) is not None:
        ancestors = n // params.waste_free
        end = t + ancestors - 1 - (t - state.wf_start - 1) % ancestors
    elif params.waste_free and t > n and t <= params.warmup and state.beta >= 1.0:
        end = min(end, t + n * params.moves - state.stage_moves - 1)
    if t <= params.warmup:
        end = min(end, params.warmup)
    return end - t + 1


def _waste_free_move(state: State, params: Params, t: int) -> tuple[int, int] | None:
    """In a waste-free stage, the particle that move ``t`` sets and the one it moves
    from (``j P + s`` and ``j P + s - 1``, :attr:`State.wf_start`); else ``None``."""
    if state.wf_start < 0 or t > params.warmup:
        return None
    p = params.waste_free
    ancestors = params.particles // p
    m = t - state.wf_start - 1
    step, j = 1 + m // ancestors, m % ancestors
    return j * p + step, j * p + step - 1


def ask_ahead(state: State, params: Params, k: int) -> Proposal:
    """The proposal ``k`` evaluations after the outstanding one, within its round."""
    return ask(state.evolve(iteration=state.iteration + k), params)


def proposal_factor(state: State, params: Params) -> FloatArray:
    """The lower Cholesky factor of the moves' proposal covariance,
    ``lambda (2.38^2 / d) (Sigma + nugget I)``."""
    scale = math.sqrt(exp1(state.log_scale)) * 2.38 / math.sqrt(params.dim)
    return np.asarray(state.factor) * scale


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    """The told log density: the ``"reference"`` mode's tell."""
    return _tell(state, params, proposal, *reference_split(params, proposal.position, logdensity))


def tell_parts(
    state: State, params: Params, proposal: Proposal, parts: Parts
) -> tuple[State, StepInfo]:
    """The told log prior and log likelihood: the ``"likelihood"`` mode's tell (in the
    ``"reference"`` mode, their sum is told)."""
    return _tell(state, params, proposal, *split_parts(params, proposal.position, parts))


def _tell(
    state: State, params: Params, proposal: Proposal, value: float, loglik: float
) -> tuple[State, StepInfo]:
    if value == -math.inf:
        loglik = -math.inf
    if state.logdensity is None:
        if proposal.kind != "init" or proposal.iteration != state.iteration:
            raise ValueError("proposal does not belong to this state")
        if value == -math.inf or loglik == -math.inf:  # waits for a new initial point
            return state, StepInfo(state.iteration, "outside_support", 0.0, True)
        n, d = params.particles, params.dim
        ball = generator(state.seed, state.chain, state.epoch, Stream.SETUP).standard_normal((n, d))
        particles = params.reference_mean + params.reference_sd * ball
        new: State = state.evolve(
            logdensity=value,
            loglik=loglik,
            particles=frozen_array(particles),
            values=frozen_array(np.full(n, math.nan)),
            logliks=frozen_array(np.full(n, math.nan)),
            log_weights=frozen_array(np.zeros(n)),
        )
        return new, StepInfo(state.iteration, "initialized", 1.0, True)
    t = state.iteration + 1
    if proposal.kind != "proposal" or proposal.iteration != t:
        raise ValueError("proposal does not belong to this state")
    n = params.particles
    k = t % n
    warm = t <= params.warmup
    values, logliks = np.array(state.values), np.array(state.logliks)
    particles = state.particles
    log_weights = state.log_weights
    outcome: Outcome
    if t <= n:  # a particle's starting point, from the reference
        values[k], logliks[k] = value, loglik
        finite = value != -math.inf and loglik != -math.inf
        if params.tempered == "likelihood" and finite:
            lw = np.array(log_weights)
            lw[k] = (value - loglik) - log_reference(params, proposal.position)
            log_weights = frozen_array(lw)
        elif not finite:
            lw = np.array(log_weights)
            lw[k] = -math.inf
            log_weights = frozen_array(lw)
        accepted, prob = finite, 1.0 if finite else 0.0
        outcome = "accepted" if finite else "rejected"
        changes: dict[str, Any] = {"iteration": t, "accepted": state.accepted + accepted}
        if finite:
            changes.update(position=proposal.position, logdensity=value, loglik=loglik)
        new = state.evolve(
            **changes,
            values=frozen_array(values),
            logliks=frozen_array(logliks),
            log_weights=log_weights,
            acceptance=prob,
        )
        if t == n:
            new = _end_stage(new, params, t, force=t >= params.warmup)
        return new, StepInfo(t, outcome, prob, warm)
    move = _waste_free_move(state, params, t)
    source = k
    if move is not None:
        k, source = move
    old_value, old_loglik = float(values[source]), float(logliks[source])
    beta = state.beta
    u = float(generator(state.seed, state.chain, t, Stream.ACCEPT).random())
    if value == -math.inf or loglik == -math.inf:
        prob, accepted = 0.0, False
    elif old_value == -math.inf or old_loglik == -math.inf:  # a particle outside the support
        prob, accepted = 1.0, True
    else:
        if state.alpha < 1.0:  # on the bridge (beta = 0): (1 - alpha) log ref + alpha log prior
            new_g = _bridged(params, state.alpha, proposal.position, value, loglik)
            old_g = _bridged(params, state.alpha, particles[source], old_value, old_loglik)
            log_alpha = new_g - old_g
        else:
            # The tempered log density is a + beta l = value - (1 - beta) l.
            log_alpha = (value - (1.0 - beta) * loglik) - (old_value - (1.0 - beta) * old_loglik)
        if math.isnan(log_alpha):
            prob, accepted = 0.0, False
        else:
            log_alpha = min(0.0, log_alpha)
            prob, accepted = exp1(log_alpha), bool(log1(u) < log_alpha)
    if accepted:
        moved = np.array(particles)
        moved[k] = proposal.position
        particles = frozen_array(moved)
        values[k], logliks[k] = value, loglik
    elif source != k:  # a waste-free chain's rejected move: its next state is its last
        moved = np.array(particles)
        moved[k] = particles[source]
        particles = frozen_array(moved)
        values[k], logliks[k] = old_value, old_loglik
    new = state.evolve(
        position=frozen_array(particles[k]),
        logdensity=float(values[k]),
        loglik=float(logliks[k]),
        iteration=t,
        accepted=state.accepted + accepted,
        particles=particles,
        values=frozen_array(values),
        logliks=frozen_array(logliks),
        acceptance=prob,
    )
    if warm:
        new = new.evolve(stage_moves=state.stage_moves + 1, stage_accept=state.stage_accept + prob)
        if state.beta < 1.0 and t == params.warmup:
            new = _end_stage(new, params, t, force=True)
        elif move is not None:
            if t - state.wf_start == n - n // params.waste_free:  # the chains' last step
                new = _end_stage(new, params, t, force=False)
            elif t == params.warmup:  # cut short: the moves after warm-up are every particle's
                new = new.evolve(wf_start=-1)
        elif new.stage_moves >= n * params.moves and _stage_done(new, params):
            new = _end_stage(new, params, t, force=False)
    outcome = "accepted" if accepted else "rejected"
    return new, StepInfo(t, outcome, prob, warm)


# --------------------------------------------------------------------------- stages


def _stage_done(state: State, params: Params) -> bool:
    """Whether a stage past its ``moves`` sweeps ends at this move: at once at
    ``beta = 1`` (warm-up's adaptation of the proposal alone) or with ``mixing`` 0; else
    at the end of a sweep after which the particles have made ``mixing d`` accepted
    moves each on average (:func:`accepted_moves`), or of the ``max_moves``-th."""
    n = params.particles
    if state.beta >= 1.0 or params.mixing == 0:
        return True
    if state.stage_moves % n:
        return False
    return state.stage_moves >= n * params.max_moves or (
        accepted_moves(state, params) >= params.mixing
    )


def accepted_moves(state: State, params: Params) -> float:
    """The stage's accepted moves per particle (the sum of the moves' acceptance
    probabilities over ``N``), per dimension. A random walk tuned to accept about a
    quarter of its moves mixes a particle within ``pi_beta`` in a number of accepted
    moves that grows with the dimension: on a 10-d Gaussian, about 0.18 of them per
    dimension (7 moves a stage, at an acceptance of 0.25) left the population
    under-dispersed and its evidence 0.64 high, 0.38 (15 moves) right."""
    return state.stage_accept / (params.particles * params.dim)


def chain_moves(state: State, params: Params) -> float:
    """A waste-free stage's accepted moves per chain and dimension: the stage's
    acceptance probabilities summed over its ``M = N / P`` chains' moves, over ``M d``.
    The ``P`` states of a chain are as far from their common ancestor as the chain has
    moved, so this is what :func:`accepted_moves` is to a stage whose particles move
    apart: below ``mixing``, the chains' states are near copies of ``M`` ancestors (the
    population holds fewer distinct points than its ``N``, and the next stage's weights
    and the evidence are biased whatever the error bar)."""
    return accepted_moves(state, params) * params.waste_free


def _bridged(params: Params, alpha: float, x: FloatArray, value: float, loglik: float) -> float:
    """The bridge's log density ``(1 - alpha) log ref + alpha log prior`` at a point in
    the support (``value - loglik`` is the told log prior)."""
    return (1.0 - alpha) * log_reference(params, x) + alpha * (value - loglik)


def _log_ratios(state: State, params: Params) -> FloatArray:
    """``h = log prior - log ref`` of each particle, ``-inf`` outside the support (where
    the prior or the likelihood is zero: such points weigh nothing from the bridge's first
    step on, and the evidence, which only the support holds, is the same)."""
    values, logliks = np.asarray(state.values), np.asarray(state.logliks)
    out = np.full(params.particles, -math.inf)
    for i, x in enumerate(np.asarray(state.particles)):
        if values[i] != -math.inf and logliks[i] != -math.inf:
            out[i] = (float(values[i]) - float(logliks[i])) - log_reference(params, x)
    return out


def _end_stage(state: State, params: Params, t: int, *, force: bool) -> State:
    """The stage's end: the next inverse temperature, the evidence's increment, the
    resampling and the next stage's proposal (and, at ``beta = 1``, the proposal
    alone); on the bridge, its next step instead (:func:`_bridge`)."""
    n = params.particles
    changes: dict[str, Any] = {"stage_moves": 0, "stage_accept": 0.0, "wf_start": -1}
    if state.stage_moves and state.beta < 1.0 and params.mixing > 0:
        moved = accepted_moves(state, params) if state.wf_start < 0 else chain_moves(state, params)
        changes["mixed"] = min(state.mixed, moved)
    if state.stage_moves:
        acc = state.stage_accept / state.stage_moves
        changes["stage_acceptance"] = acc
        step = scale_step(acc, params.target_acceptance, params.dim, state.stage_moves)
        changes["log_scale"] = min(20.0, max(-20.0, state.log_scale + step))
    skipped_bridge = False
    if state.alpha < 1.0:
        bridged, skipped_bridge = _bridge(state, params, t, force=force, changes=changes)
        if bridged.alpha < 1.0:
            return bridged
        state = bridged
    logliks = np.asarray(state.logliks)
    weights = normalised(state.log_weights) if np.any(np.isfinite(state.log_weights)) else None
    particles = np.asarray(state.particles)
    if state.beta < 1.0:
        left = 1.0 - state.beta
        if weights is None:  # no particle in the support: nothing to weigh
            delta = left
            changes["log_evidence"] = -math.inf
            new_lw = np.asarray(state.log_weights)
        else:
            fraction = conditional_ess(weights, logliks, left)
            delta = left if force else next_delta(weights, logliks, left, params.ess_fraction)
            if delta < left:
                fraction = conditional_ess(weights, logliks, delta)
            if state.stages == 0:  # the starting weights (uniform in the reference mode)
                changes["min_ess"] = min(state.min_ess, 1.0 / float(np.add.reduce(weights**2)))
            new_lw = np.asarray(state.log_weights) + increment(logliks, delta)
            start = log_mean_exp(state.log_weights) if state.stages == 0 else 0.0
            # log sum W w = log mean exp(lw + inc) - log mean exp(lw); the first stage
            # adds the starting weights' log mean exp (0 in the reference mode).
            gained = log_mean_exp(new_lw) - log_mean_exp(state.log_weights) + start
            changes["log_evidence"] = state.log_evidence + gained
            changes["min_ess"] = min(changes.get("min_ess", state.min_ess), fraction * n)
        beta = 1.0 if delta >= left else state.beta + delta
        skipped = weights is None or conditional_ess(weights, logliks, left) < params.ess_fraction
        skipped = skipped or skipped_bridge
        changes.update(beta=beta, stages=state.stages + 1, unfinished=force and skipped)
        if force:
            changes["forced_from"] = state.beta
        if np.any(np.isfinite(new_lw)):
            new_w = normalised(new_lw)
            changes["factor"] = _factor(particles, new_w, params, state.factor)
            keep, wf_start = _resample(state, params, t, new_w)
            changes.update(
                wf_start=wf_start,
                particles=frozen_array(particles[keep]),
                values=frozen_array(np.asarray(state.values)[keep]),
                logliks=frozen_array(logliks[keep]),
                log_weights=frozen_array(np.zeros(n)),
            )
    else:  # at beta = 1 in warm-up: the proposal alone
        changes["factor"] = _factor(particles, np.full(n, 1.0 / n), params, state.factor)
    new: State = state.evolve(**changes)
    return new


def _resample(
    state: State, params: Params, t: int, weights: FloatArray
) -> tuple[npt.NDArray[np.intp], int]:
    """The particles a stage's end keeps (systematic resampling with one uniform of the
    transition's ``MIX`` stream), and the next stage's :attr:`State.wf_start`: ``N`` of
    them, or with ``waste_free`` ``P`` in warm-up, ``M = N / P`` ancestors, each
    ``P`` times, chain ``j`` at particles ``j P .. j P + P - 1`` (its moves then set
    all but the first). A stage's end at the warm-up's last transition resamples ``N``:
    no moves of the tempering follow it."""
    u = float(generator(state.seed, state.chain, t, Stream.MIX).random())
    if not params.waste_free or t >= params.warmup:
        return systematic_resample(weights, u), -1
    p = params.waste_free
    ancestors = systematic_resample(weights, u, params.particles // p)
    return np.repeat(ancestors, p), t


def scale_step(acceptance: float, target: float, dim: int, moves: int) -> float:
    """The change of the moves' ``log lambda`` after a stage whose ``moves`` moves
    accepted ``acceptance`` on average: up, ``2 (acceptance - target)``; down, the
    larger step of that and ``(2 / d) log(acceptance / target)`` (the acceptance floored
    at one move of the stage).

    A Gaussian random walk far wider than the region it samples accepts about the ratio
    of the two volumes, ``lambda^(-d/2)`` up to a constant, so ``log lambda`` must move by
    ``(2 / d) log(target / acceptance)`` to reach the target. The linear step alone
    moves ``log lambda`` down by at most 0.5 a stage, which on well-separated modes (a
    population's covariance spanning peaks a hundred times narrower) left the moves
    accepting under 1 % through the whole tempering; near the target in higher
    dimensions it is the larger, and is kept."""
    linear = 2.0 * (acceptance - target)
    if acceptance >= target:
        return linear
    floor = max(acceptance, 1.0 / max(moves, 1))
    return min(linear, (2.0 / dim) * log1(floor / target))


def _bridge(
    state: State, params: Params, t: int, *, force: bool, changes: dict[str, Any]
) -> tuple[State, bool]:
    """A stage's end on the bridge from the reference to the prior (the likelihood mode,
    ``alpha < 1``), ``pi_alpha = ref^(1 - alpha) prior^alpha``, whose incremental weights
    are ``exp(delta h)``, ``h = log prior - log ref``.

    When the rest of the bridge keeps the conditional effective sample size at
    ``ess_fraction`` (a reference that covers the prior: at the first stage, the starting
    weights ``prior / ref`` themselves), or the step is forced, the bridge is crossed at
    once: the state comes back with ``alpha = 1`` and the weights ``prior / ref`` (times
    those it had), for the stage's step in ``beta``. Otherwise ``alpha`` moves by the
    step that keeps it there, with the evidence's increment, the resampling and the next
    stage's proposal (``changes`` applied), and the next stage's moves sample
    ``pi_alpha``: particles drawn from a reference that covers the prior poorly (a box
    prior's corners in 10 dimensions) reach it by moves, not by weights on a few of
    them. The second value: whether a forced step skipped stages."""
    n = params.particles
    first = state.stages == 0
    # At the first stage the tells left h (or -inf) in the weights of the reference's
    # equally weighted draws.
    h = np.asarray(state.log_weights) if first else _log_ratios(state, params)
    current = np.zeros(n) if first else np.asarray(state.log_weights)
    weights = normalised(current)
    left = 1.0 - state.alpha
    whole = conditional_ess(weights, h, left) if np.any(np.isfinite(h)) else 0.0
    if force or whole >= params.ess_fraction or not np.any(np.isfinite(h)):
        if first:  # the starting weights, as a reference that covers the prior gives them
            return state.evolve(alpha=1.0), whole < params.ess_fraction
        lw = current + increment(h, left)
        crossed: State = state.evolve(
            alpha=1.0,
            log_weights=frozen_array(lw),
            log_evidence=state.log_evidence + log_mean_exp(lw) - log_mean_exp(current),
        )
        return crossed, whole < params.ess_fraction
    delta = next_delta(weights, h, left, params.ess_fraction)
    least = min(state.min_ess, conditional_ess(weights, h, delta) * n)
    if first:  # what the starting weights prior / ref would have been: the warning's
        least = min(least, 1.0 / float(np.add.reduce(normalised(h) ** 2)))
    new_lw = current + increment(h, delta)
    new_w = normalised(new_lw)
    particles = np.asarray(state.particles)
    keep, wf_start = _resample(state, params, t, new_w)
    changes.update(
        wf_start=wf_start,
        alpha=state.alpha + delta,
        stages=state.stages + 1,
        log_evidence=state.log_evidence + log_mean_exp(new_lw) - log_mean_exp(current),
        min_ess=least,
        factor=_factor(particles, new_w, params, state.factor),
        particles=frozen_array(particles[keep]),
        values=frozen_array(np.asarray(state.values)[keep]),
        logliks=frozen_array(np.asarray(state.logliks)[keep]),
        log_weights=frozen_array(np.zeros(n)),
    )
    bridged: State = state.evolve(**changes)
    return bridged, False


def _factor(
    particles: FloatArray, weights: FloatArray, params: Params, old: FloatArray
) -> FloatArray:
    """The Cholesky factor of the population's weighted covariance plus the nugget; the
    old factor if that is not usable."""
    x = np.asarray(particles, dtype=np.float64)
    finite = np.all(np.isfinite(x), axis=1)
    w = np.where(finite, weights, 0.0)
    total = float(np.add.reduce(w))
    if total <= 0:
        return old
    w = w / total
    x = np.where(finite[:, None], x, 0.0)
    mean = matrices.vecmat(w, x)
    centred = x - mean
    cov = matrices.matmul(centred.T * w, centred)
    cov = 0.5 * (cov + cov.T)
    if not usable_covariance(cov) or not np.all(np.diagonal(cov) > 0):
        return old
    try:
        return frozen_array(jittered_cholesky(cov + params.nugget * np.eye(params.dim)))
    except np.linalg.LinAlgError:
        return old


def needs_parts(params: Params) -> bool:
    """Whether every result must tell the log prior and the log likelihood apart."""
    return params.tempered == "likelihood"


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    population and its told values, weights and log likelihoods, twice (before and
    after a resampling), and the proposal's factor and the covariance."""
    n = params.particles
    return 40 + 2 * n * (dim + 4) + 3 * dim * dim + 4 * dim


def population_inflation(params: Params) -> float:
    """``kappa`` of the assessment's population reading (:mod:`core.diagnostics.population`):
    ``2 / ess_fraction``. Each stage resamples a population whose conditional effective
    sample size is ``ess_fraction N``, and the stages compound; measured on separated
    modes, the variance of a chain's share of a mode was 1.6 to 4.1 times that of ``N``
    independent particles at the default 0.5.

    With ``waste_free`` ``P``, ``P + 4 / ess_fraction``: the last stage's ``N`` particles
    are ``M = N / P`` ancestors' chains, which do not cross separated modes, so a
    chain's share of a mode is about that of ``M`` resampled ancestors. On the
    two-mode mixture of BENCHMARKS.md section 12 (256 particles, 16 chains, seeds 1 to
    3) the variance of a chain's share was 11, 23 and 52 times the binomial one at
    ``P`` 4, 16 and 64."""
    if params.waste_free:
        return params.waste_free + 4.0 / params.ess_fraction
    return 2.0 / params.ess_fraction


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
    tell_parts=tell_parts,
    parts_value=parts_value,
    stats=("beta", "acceptance", "stage_acceptance"),
    pseudo_marginal_refusal=pseudo_marginal_refusal,
    needs_parts=needs_parts,
    chain_evidence=evidence_of,
    ensemble_size=lambda params: params.particles,
    population=population_inflation,
    round_size=round_size,
    ask_ahead=ask_ahead,
)
