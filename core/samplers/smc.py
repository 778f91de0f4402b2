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
(the record's ``population``, :mod:`core.population`): a particle need not mix on its
own, and on separated modes never leaves the one it sits in, while the population
carries each mode with its weight; R-hat compares the chains' populations.

**The evidence** ``Z = ∫ exp(a + l)`` (the reference integrates to 1; in the likelihood
mode the prior's normaliser times the marginal likelihood): each chain's estimate is the
sum of its stages' ``log sum W w`` (in the likelihood mode with the starting weights'
``log mean w``), the log of an estimate of ``Z`` that is unbiased for fixed
temperatures (the adaptive ones, chosen from the same particles, add a small bias).
:func:`chain_evidence` takes the log of the mean of the chains' ``Z``, and its standard
error by the delta method. The mean of the chains' ``log Z`` would be biased low by about
half a chain's variance of ``log Z``; the log of their mean is biased low by
``1 / chains`` of it. A chain's variance of ``log Z`` is small when its moves mix the
population well at every stage, and grows fast when they do not (a population whose
covariance spans separated modes, too few moves for the dimension): chains whose
estimates disagree so much that a few of them carry the mean warn
``evidence_unreliable`` (:func:`chains_ess`, :data:`CHAINS_SHARE`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from kameleon.core import arithmetic
from kameleon.core.adaptation import usable_covariance
from kameleon.core.arithmetic import exp1, log1, matvec
from kameleon.core.base import (
    ChainState,
    FloatArray,
    OptionError,
    Outcome,
    Parts,
    Proposal,
    Sampler,
    StepInfo,
    frozen_array,
    new_chain_fields,
    params_parser,
)
from kameleon.core.checks import Finding
from kameleon.core.evidence import Evidence
from kameleon.core.linalg import jittered_cholesky
from kameleon.core.rng import Stream, generator
from kameleon.core.serialization import register
from kameleon.core.stepping_stones import MIN_CHAINS_FOR_ERROR, few_chains
from kameleon.core.tempered import (
    log_reference,
    parts_value,
    pseudo_marginal_refusal,
    reference_split,
    split_parts,
)

__all__ = [
    "CHAINS_SHARE",
    "COLLAPSE",
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "chain_evidence",
    "chain_floats",
    "chains_ess",
    "conditional_ess",
    "evidence_findings",
    "init",
    "log_mean_exp",
    "make_params",
    "next_delta",
    "population_inflation",
    "scale_step",
    "systematic_resample",
    "tell",
    "tell_parts",
]

NAME = "smc"

#: A chain whose weights' effective sample size fell below this share of the one its
#: stages keep (``ess_fraction`` of the particles) warns ``evidence_unreliable``; the
#: stages' bisection keeps it (to its precision) unless the step is forced.
COLLAPSE = 0.5

#: The chains' estimates of ``Z`` disagree when fewer than this share of the chains
#: carries their mean (:func:`chains_ess`): ``evidence_unreliable``. A chain's
#: ``log Z`` whose standard deviation is ``sigma`` gives about ``exp(-sigma^2)`` of the
#: chains, a half at ``sigma`` 0.83.
CHAINS_SHARE = 0.5

#: Bisection steps for the next inverse temperature: the increment to ``2^-60`` of
#: what is left.
_BISECTIONS = 60
#: The smallest increment of ``beta`` a stage makes (a population whose effective
#: sample size falls at any step still moves on).
_MIN_DELTA = 1e-12


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
    log_scale, factor
        The proposal's ``log lambda`` and the Cholesky factor of the population's
        covariance plus the nugget, ``(dim, dim)``.
    acceptance, stage_acceptance
        The last move's acceptance probability, and the mean of the last ended stage's.
    mixed
        The least of the tempering's stages' accepted moves per particle and dimension
        (:func:`accepted_moves`).
    alpha
        The bridge's power of the prior against the reference, ``pi = ref^(1 - alpha)
        prior^alpha L^beta`` (the likelihood mode; 1 once the bridge is crossed, and in
        the reference mode, whose ``a`` is the reference).
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
    current = np.asarray(state.particles[k])
    if t <= n:  # a particle's starting point
        return Proposal(t, "proposal", state.particles[k])
    z = generator(state.seed, state.chain, t, Stream.PROPOSE).standard_normal(params.dim)
    point = current + matvec(proposal_factor(state, params), z)
    if not np.all(np.isfinite(point)):
        point = current  # an overflow: propose staying put (the kernel stays exact)
    return Proposal(t, "proposal", frozen_array(point))


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
    old_value, old_loglik = float(values[k]), float(logliks[k])
    beta = state.beta
    u = float(generator(state.seed, state.chain, t, Stream.ACCEPT).random())
    if value == -math.inf or loglik == -math.inf:
        prob, accepted = 0.0, False
    elif old_value == -math.inf or old_loglik == -math.inf:  # a particle outside the support
        prob, accepted = 1.0, True
    else:
        if state.alpha < 1.0:  # on the bridge (beta = 0): (1 - alpha) log ref + alpha log prior
            new_g = _bridged(params, state.alpha, proposal.position, value, loglik)
            log_alpha = new_g - _bridged(params, state.alpha, particles[k], old_value, old_loglik)
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


def log_mean_exp(x: FloatArray) -> float:
    """``log mean exp(x)`` (``-inf`` when every entry is), with the module's exp and log:
    the same bits on every CPU."""
    a = np.asarray(x, dtype=np.float64)
    top = float(np.max(a))
    if top == -math.inf:
        return -math.inf
    return top + log1(float(np.add.reduce(arithmetic.exp(_below(a, top)))) / a.size)


def _normalised(log_weights: FloatArray) -> FloatArray:
    lw = np.asarray(log_weights, dtype=np.float64)
    top = float(np.max(lw))
    w = arithmetic.exp(_below(lw, top))
    out: FloatArray = w / float(np.add.reduce(w))
    return out


def _below(a: FloatArray, top: float) -> FloatArray:
    """``a - top`` for ``top = max(a)`` finite: a difference past the float range (told
    values near +-1e308) is ``-inf``, a weight of zero, as it is in exact arithmetic to
    within 1e-308."""
    with np.errstate(over="ignore"):
        out: FloatArray = a - top
    return out


def conditional_ess(weights: FloatArray, logliks: FloatArray, delta: float) -> float:
    """The conditional effective sample size, as a fraction of the particles, of the
    incremental weights ``exp(delta l)`` under the normalised ``weights``:
    ``(sum W w)^2 / sum W w^2`` (1 at ``delta = 0``; 0 when every particle has
    ``l = -inf``)."""
    lw = _increment(logliks, delta)
    top = float(np.max(lw))
    if top == -math.inf:
        return 0.0
    w = arithmetic.exp(_below(lw, top))
    first = float(np.add.reduce(weights * w))
    second = float(np.add.reduce(weights * w * w))
    return first * first / second if second > 0 else 0.0


def _increment(logliks: FloatArray, delta: float) -> FloatArray:
    """``delta l``, with ``-inf`` for ``l = -inf`` (and for a particle not evaluated)."""
    ll = np.asarray(logliks, dtype=np.float64)
    finite = np.isfinite(ll)
    out: FloatArray = np.where(finite, delta * np.where(finite, ll, 0.0), -math.inf)
    return out


def next_delta(weights: FloatArray, logliks: FloatArray, left: float, fraction: float) -> float:
    """The increment ``delta`` of ``beta`` (at most ``left``, at least a tiny positive
    number) at which :func:`conditional_ess` is ``fraction``, by bisection; ``left`` when
    the whole step keeps it at or above ``fraction``."""
    if conditional_ess(weights, logliks, left) >= fraction:
        return left
    lo, hi = 0.0, left
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if conditional_ess(weights, logliks, mid) >= fraction:
            lo = mid
        else:
            hi = mid
    return max(lo, min(_MIN_DELTA, left))


def systematic_resample(weights: FloatArray, u: float) -> npt.NDArray[np.intp]:
    """The indices that systematic resampling with the uniform ``u`` keeps from the
    normalised ``weights``: particle ``i`` as many times as the points
    ``(j + u) / N`` in its slice of the cumulative weights (its expected count is
    ``N W_i``)."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.size
    cumulative = np.cumsum(w)
    cumulative[-1] = 1.0  # rounding aside, it is
    points = (np.arange(n) + u) / n
    out: npt.NDArray[np.intp] = np.searchsorted(cumulative, points, side="right")
    return np.minimum(out, n - 1)


def _end_stage(state: State, params: Params, t: int, *, force: bool) -> State:
    """The stage's end: the next inverse temperature, the evidence's increment, the
    resampling and the next stage's proposal (and, at ``beta = 1``, the proposal
    alone); on the bridge, its next step instead (:func:`_bridge`)."""
    n = params.particles
    changes: dict[str, Any] = {"stage_moves": 0, "stage_accept": 0.0}
    if state.stage_moves and state.beta < 1.0 and params.mixing > 0:
        changes["mixed"] = min(state.mixed, accepted_moves(state, params))
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
    weights = _normalised(state.log_weights) if np.any(np.isfinite(state.log_weights)) else None
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
            new_lw = np.asarray(state.log_weights) + _increment(logliks, delta)
            start = log_mean_exp(state.log_weights) if state.stages == 0 else 0.0
            # log sum W w = log mean exp(lw + inc) - log mean exp(lw); the first stage
            # adds the starting weights' log mean exp (0 in the reference mode).
            increment = log_mean_exp(new_lw) - log_mean_exp(state.log_weights) + start
            changes["log_evidence"] = state.log_evidence + increment
            changes["min_ess"] = min(changes.get("min_ess", state.min_ess), fraction * n)
        beta = 1.0 if delta >= left else state.beta + delta
        skipped = weights is None or conditional_ess(weights, logliks, left) < params.ess_fraction
        skipped = skipped or skipped_bridge
        changes.update(beta=beta, stages=state.stages + 1, unfinished=force and skipped)
        if np.any(np.isfinite(new_lw)):
            new_w = _normalised(new_lw)
            changes["factor"] = _factor(particles, new_w, params, state.factor)
            u = float(generator(state.seed, state.chain, t, Stream.MIX).random())
            keep = systematic_resample(new_w, u)
            changes.update(
                particles=frozen_array(particles[keep]),
                values=frozen_array(np.asarray(state.values)[keep]),
                logliks=frozen_array(logliks[keep]),
                log_weights=frozen_array(np.zeros(n)),
            )
    else:  # at beta = 1 in warm-up: the proposal alone
        changes["factor"] = _factor(particles, np.full(n, 1.0 / n), params, state.factor)
    new: State = state.evolve(**changes)
    return new


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
    weights = _normalised(current)
    left = 1.0 - state.alpha
    whole = conditional_ess(weights, h, left) if np.any(np.isfinite(h)) else 0.0
    if force or whole >= params.ess_fraction or not np.any(np.isfinite(h)):
        if first:  # the starting weights, as a reference that covers the prior gives them
            return state.evolve(alpha=1.0), whole < params.ess_fraction
        lw = current + _increment(h, left)
        crossed: State = state.evolve(
            alpha=1.0,
            log_weights=frozen_array(lw),
            log_evidence=state.log_evidence + log_mean_exp(lw) - log_mean_exp(current),
        )
        return crossed, whole < params.ess_fraction
    delta = next_delta(weights, h, left, params.ess_fraction)
    least = min(state.min_ess, conditional_ess(weights, h, delta) * n)
    if first:  # what the starting weights prior / ref would have been: the warning's
        least = min(least, 1.0 / float(np.add.reduce(_normalised(h) ** 2)))
    new_lw = current + _increment(h, delta)
    new_w = _normalised(new_lw)
    particles = np.asarray(state.particles)
    u = float(generator(state.seed, state.chain, t, Stream.MIX).random())
    keep = systematic_resample(new_w, u)
    changes.update(
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
    mean = arithmetic.vecmat(w, x)
    centred = x - mean
    cov = arithmetic.matmul(centred.T * w, centred)
    cov = 0.5 * (cov + cov.T)
    if not usable_covariance(cov) or not np.all(np.diagonal(cov) > 0):
        return old
    try:
        return frozen_array(jittered_cholesky(cov + params.nugget * np.eye(params.dim)))
    except np.linalg.LinAlgError:
        return old


# --------------------------------------------------------------------------- evidence


def log_evidence(state: State) -> float:
    """The chain's estimate of ``log Z``; NaN until its tempering has reached 1."""
    if state.logdensity is None or state.beta < 1.0:
        return math.nan
    return state.log_evidence


def chain_evidence(states: Sequence[State], params: Params) -> Evidence | None:
    """The log evidence of the chains that reached ``beta = 1``: the log of the mean of
    their estimates of ``Z`` (each unbiased for fixed temperatures, so their mean is too,
    and its log is biased low by about ``1 / chains`` of a chain's variance of ``log Z``,
    where the mean of the chains' ``log Z`` is biased low by half of it); its standard
    error by the delta method, the standard deviation of ``Z_c / mean(Z)`` over
    ``sqrt(chains)`` (NaN with one chain); ``ess`` the smallest conditional effective
    sample size of a stage, summed over the chains; ``pareto_k`` NaN; ``draws`` every
    chain's post-warm-up draws. ``None`` before any chain's tempering reached 1."""
    done = [s for s in states if not math.isnan(log_evidence(s))]
    if not done:
        return None
    values = np.array([s.log_evidence for s in done])
    draws = sum(max(0, s.iteration - params.warmup) for s in done)
    mean = log_mean_exp(values)
    ratios = _evidence_ratios(values)
    se = (
        float(np.std(ratios, ddof=1) / math.sqrt(values.size))
        if values.size > 1 and ratios is not None
        else math.nan
    )
    ess = float(sum(s.min_ess for s in done))
    return Evidence(mean, se, ess, math.nan, draws)


def _evidence_ratios(log_z: FloatArray) -> FloatArray | None:
    """``Z_c / mean(Z)`` of the chains' estimates (``None`` when every one is zero or
    one is infinite)."""
    top = float(np.max(log_z))
    if not math.isfinite(top):
        return None
    z = arithmetic.exp(_below(np.asarray(log_z, dtype=np.float64), top))
    out: FloatArray = z / float(np.mean(z))
    return out


def chains_ess(log_z: FloatArray) -> float:
    """Kish's effective number of chains behind the mean of their estimates of ``Z``,
    ``(sum Z_c)^2 / sum Z_c^2``: the chains' count when they agree, near 1 when one
    chain's estimate dwarfs the others'."""
    ratios = _evidence_ratios(log_z)
    if ratios is None:
        return math.nan
    return float(np.sum(ratios)) ** 2 / float(np.sum(ratios * ratios))


def evidence_findings(states: Sequence[State], params: Params) -> list[Finding]:
    """The warnings: ``smc_unfinished`` (a chain's warm-up ended before its tempering
    reached ``beta = 1``, which was then forced: its draws and its evidence are
    unreliable) and ``evidence_unreliable`` (fewer than 4 chains reached 1; a chain's
    weights fell below :data:`COLLAPSE` of the effective sample size its stages keep,
    ``ess_fraction N``: in the likelihood mode, starting weights ``prior / reference``
    dominated by a few particles, a reference that does not cover the prior well; or
    fewer than :data:`CHAINS_SHARE` of the chains carry the mean of their ``Z``)."""
    found: list[Finding] = []
    told = [s for s in states if s.logdensity is not None and s.iteration >= params.particles]
    unfinished = [s.chain for s in told if s.unfinished]
    if unfinished:
        found.append(
            Finding(
                "smc_unfinished",
                None,
                unfinished[0] if len(unfinished) == 1 else None,
                float(len(unfinished)),
                0.0,
                f"{len(unfinished)} of {len(told)} chains had not reached beta = 1 when "
                "warm-up ended: the last step to 1 was forced, so their first draws after "
                "warm-up and the evidence are unreliable",
            )
        )
    ev = chain_evidence(states, params)
    done = [s for s in states if not math.isnan(log_evidence(s))]
    planned = params.ess_fraction * params.particles
    collapsed = [s for s in done if s.min_ess < COLLAPSE * planned and not s.unfinished]
    if collapsed:
        worst = min(collapsed, key=lambda s: s.min_ess)
        found.append(
            Finding(
                "evidence_unreliable",
                None,
                worst.chain if len(collapsed) == 1 else None,
                float(worst.min_ess),
                COLLAPSE * planned,
                f"{len(collapsed)} of {len(done)} chains' weights fell to an effective "
                f"sample size of {worst.min_ess:.0f} particles at worst, under "
                f"{COLLAPSE * planned:.0f} (the stages keep {planned:.0f}): the evidence "
                "rests on a few particles, and its error bar does not show it"
                + (
                    " (in the likelihood mode: the starting weights prior / reference, a "
                    "reference that covers the prior poorly, which the bridge to the prior "
                    "crosses with heavy weights; a reference at least as wide as the "
                    "prior: reference_mean and reference_sd)"
                    if params.tempered == "likelihood"
                    else ""
                ),
            )
        )
    unmixed = [s for s in done if s.mixed < params.mixing and not s.unfinished]
    if unmixed:
        worst = min(unmixed, key=lambda s: s.mixed)
        found.append(
            Finding(
                "evidence_unreliable",
                None,
                worst.chain if len(unmixed) == 1 else None,
                float(worst.mixed),
                params.mixing,
                f"{len(unmixed)} of {len(done)} chains had a stage whose moves ended "
                f"(max_moves {params.max_moves}) before the particles mixed: "
                f"{worst.mixed:.2f} accepted moves per particle and dimension at worst, "
                f"under {params.mixing:g} (mixing); the next stage weighed too few "
                "distinct points, and the evidence is biased whatever its error bar "
                "(a larger max_moves)",
            )
        )
    if ev is not None and len(done) < MIN_CHAINS_FOR_ERROR:
        found.append(few_chains(len(done)))
    elif ev is not None:
        log_z = np.array([s.log_evidence for s in done])
        carried = chains_ess(log_z)
        if carried < CHAINS_SHARE * len(done):
            spread = (
                float(np.std(log_z[np.isfinite(log_z)], ddof=1))
                if np.sum(np.isfinite(log_z)) > 1
                else math.inf
            )
            found.append(
                Finding(
                    "evidence_unreliable",
                    None,
                    None,
                    carried,
                    CHAINS_SHARE * len(done),
                    f"the chains' estimates of log Z spread by a standard deviation of "
                    f"{spread:.2f}, so that {carried:.1f} of {len(done)} chains carry their "
                    "mean: the evidence and its error bar rest on a few chains (more "
                    "particles, more moves or a larger ess_fraction narrow the spread)",
                )
            )
    return found


def evidence_of(states: Sequence[State], params: Params) -> tuple[Evidence | None, list[Finding]]:
    """:func:`chain_evidence` and :func:`evidence_findings` together (the record's
    ``chain_evidence``)."""
    return chain_evidence(states, params), evidence_findings(states, params)


def needs_parts(params: Params) -> bool:
    """Whether every result must tell the log prior and the log likelihood apart."""
    return params.tempered == "likelihood"


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.memory`): the
    population and its told values, weights and log likelihoods, twice (before and
    after a resampling), and the proposal's factor and the covariance."""
    n = params.particles
    return 40 + 2 * n * (dim + 4) + 3 * dim * dim + 4 * dim


def population_inflation(params: Params) -> float:
    """``kappa`` of the assessment's population reading (:mod:`core.population`):
    ``2 / ess_fraction``. Each stage resamples a population whose conditional effective
    sample size is ``ess_fraction N``, and the stages compound; measured on separated
    modes, the variance of a chain's share of a mode was 1.6 to 4.1 times that of ``N``
    independent particles at the default 0.5."""
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
)
