"""Parallel tempering within one chain: a ladder of replicas at inverse temperatures
``1 = beta_0 > beta_1 > ... > beta_{K-1} > 0``, with swaps between neighbours, and the
log evidence by stepping stones.

**Tempered targets.** Every rung's density is ``pi_beta(x) ∝ exp(a(x) + beta l(x))``:

- ``tempered: "likelihood"``: the results tell the log prior and the log likelihood
  apart, ``a`` is the log prior (times the session's ``prior_power``) and ``l`` the log
  likelihood: ``pi_beta ∝ prior L^beta``, the prior at ``beta = 0``, the posterior at 1.
- ``tempered: "reference"`` (default): the results tell the log density ``log pi``
  alone, and the chain tempers from a reference Gaussian
  ``ref = N(reference_mean, reference_sd^2 I)``: ``a = log ref``,
  ``l = log pi - log ref``, ``pi_beta ∝ ref^(1 - beta) pi^beta``. Its defaults (mean 0,
  sd 2) are the box that starting points are drawn from when none is given
  (:data:`core.running.initial.DEFAULT_RADIUS`); give the session's centre and a scale at least
  the target's when the target lies elsewhere.

**A transition** makes one random-walk Metropolis step on every rung, hottest first,
each a Gaussian step with the rung's own covariance (``am``'s: a scale adapted by
Robbins-Monro toward 0.234 and the rung's states' covariance in doubling windows,
during warm-up only). Each rung's point is an evaluation of its own, handed out one at a
time (``Proposal.step`` = ``K - 1 - rung``): the hot rungs' as ``"tempered"``, the cold
rung's last, as ``"proposal"``. Then the rungs swap states in the non-reversible
deterministic even/odd scheme (Okabe et al. 2001; Syed, Bouchard-Côté, Deligiannidis and
Doucet 2021): even transitions try the pairs ``(0, 1), (2, 3), ...``, odd ones
``(1, 2), (3, 4), ...``, each accepted with probability
``min(1, exp((beta_i - beta_j) (l_j - l_i)))``; a swap needs no evaluation. The draw is
the cold rung's state after the swaps. The initial point is one ``"init"`` evaluation
that every rung starts from.

**Warm-up** also moves the interior rungs toward equal swap rejection rates (Syed et
al. 2021, Algorithm 4): at the end of each window the rejection rates ``r_i`` of the
pairs (averaged over the window, every pair's swap probability counted at every
transition) give the communication barrier ``Lambda``, piecewise linear in ``log beta``,
and the new ladder divides it evenly. ``beta_0 = 1`` and ``beta_{K-1}`` stay where
they are. The windows are ``am``'s (:func:`core.tuning.windows.window_ends`); the last one
(from ``warmup / 2``) tunes the scales alone, to the covariances and the ladder the chain
keeps. After warm-up nothing adapts: the chain is an exact Markov chain for the product
of the rungs' targets, whose cold marginal is the target.

**The evidence** ``Z = ∫ exp(a + l)`` (relative to ``∫ exp(a)``: 1 for the reference,
and for a normalised prior). Stepping stones (Xie et al. 2011): with ``n`` post-warm-up
states of every rung,
``log Z = sum_{k < K-1} log mean_{rung k+1} exp((beta_k - beta_{k+1}) l)
- log mean_{rung K-1} exp(-beta_{K-1} l)``: the last stone, from ``beta_{K-1}`` down to 0,
is estimated from the hottest rung's states (accurate when ``beta_{K-1}`` times the spread
of ``l`` there is small). The state keeps only running log-sum-exps (and those of the
squared weights, for their effective sample sizes): ``O(K)`` floats.
:func:`chain_evidence` averages the chains' estimates and takes their spread for the
standard error. Each chain's estimate is a sum of logs of means, biased low by
``O(1 / n)``, which the chains' spread does not show: at 400 draws per chain of 16
chains the estimates were about half a reported standard error low on average, and off
by 1.2 of them in root mean square (BENCHMARKS.md, section 10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Parts,
    Proposal,
    StepInfo,
    frozen_array,
    new_chain_fields,
)
from kameleon.core.interface.codec import register
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.numerics import arithmetic
from kameleon.core.numerics.arithmetic import exp1, log1, pow1
from kameleon.core.numerics.linalg import jittered_cholesky
from kameleon.core.numerics.matrices import matvec
from kameleon.core.numerics.rng import Stream, generator, substream
from kameleon.core.populations.stepping_stones import evidence_of
from kameleon.core.populations.tempered import (
    needs_parts,
    parts_value,
    pseudo_marginal_refusal,
    reference_split,
    split_parts,
)
from kameleon.core.tuning.adaptation import learning_rate, robbins_monro, usable_covariance
from kameleon.core.tuning.windows import window_ends

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "adapt_ladder",
    "ask",
    "ask_ahead",
    "chain_floats",
    "geometric_ladder",
    "init",
    "make_params",
    "round_size",
    "swap_probability",
    "tell",
    "tell_parts",
]

NAME = "tempering"

#: Added to every pair's rejection rate before the ladder is adapted, so that the
#: barrier grows strictly and a pair that always swapped keeps some width.
_RATE_FLOOR = 1e-3


@dataclass(frozen=True, slots=True)
class Params:
    """Options of parallel tempering.

    Attributes
    ----------
    temperatures
        ``K``, the rungs of each chain's ladder, the cold one included (default 8; 2 to
        64). Every transition costs ``K`` evaluations.
    max_temperature
        The hottest rung's temperature ``1 / beta_{K-1}`` (default 1000); the first
        ladder is geometric from 1 to it, and warm-up moves the rungs between.
    tempered
        ``"reference"`` (default): temper the told log density from the reference
        Gaussian; ``"likelihood"``: every result tells ``log_prior`` and
        ``log_likelihood`` apart, and the likelihood is tempered.
    reference_mean, reference_sd
        The reference Gaussian ``N(reference_mean, reference_sd^2 I)`` of the
        ``"reference"`` mode (default mean 0 and sd 2: the box that starting points are
        drawn from when none is given).
    initial_scale
        ``sigma_0``: every rung's first proposal covariance is ``am``'s from
        ``sigma_0^2 I`` (default 1).
    adapt_start
        The fewest transitions a warm-up window holds (``am``'s windows, merged where
        shorter): at each window's end but the last, the rungs' covariances are
        estimated from its states and the ladder from its swap rates (default
        ``max(100, 2 * dim)``; at least 2).
    nugget
        ``am``'s nugget, relative to ``sigma_0^2`` (default ``1e-6``; positive).
    target_acceptance
        Target of each rung's scale adaptation (default 0.234).
    adapt_ladder
        Move the interior rungs toward equal swap rates at the end of every warm-up
        window (default true).
    """

    dim: int
    warmup: int
    temperatures: int = 8
    max_temperature: float = 1000.0
    tempered: Literal["reference", "likelihood"] = "reference"
    reference_mean: float = 0.0
    reference_sd: float = 2.0
    initial_scale: float = 1.0
    adapt_start: int | None = None
    nugget: float = 1e-6
    target_acceptance: float = 0.234
    adapt_ladder: bool = True

    def __post_init__(self) -> None:
        if not 2 <= self.temperatures <= 64:
            raise OptionError("temperatures", "must be an integer from 2 to 64")
        if not (1 < self.max_temperature <= 1e12):
            raise OptionError("max_temperature", "must be above 1 and at most 1e12")
        if not self.reference_sd > 0:
            raise OptionError("reference_sd", "must be positive")
        if not self.initial_scale > 0:
            raise OptionError("initial_scale", "must be positive")
        if self.adapt_start is not None and self.adapt_start < 2:
            raise OptionError("adapt_start", "must be at least 2")
        if not self.nugget > 0:
            raise OptionError("nugget", "must be positive")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")

    @property
    def start(self) -> int:
        """The fewest transitions a warm-up window holds."""
        return self.adapt_start if self.adapt_start is not None else max(100, 2 * self.dim)


@register("tempering.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A chain of parallel tempering: its common fields are the cold rung's.

    Attributes
    ----------
    step
        Rungs told in the current transition (the next ask's ``Proposal.step``; the rung
        asked for is ``K - 1 - step``).
    evaluations
        Every evaluation told, the initial points' included.
    betas
        The ladder, ``(K,)``, from 1 down.
    rung_positions
        Every rung's state, ``(K, dim)``.
    rung_values, rung_loglik
        The told value ``a + l`` and ``l`` at each rung's state (the module docstring),
        ``(K,)``; the rung's tempered log density is ``a + beta l``.
    log_scales
        Each rung's proposal scale ``log lambda``, ``(K,)``.
    count, means, m2
        The rungs' states in the current warm-up window: how many, their running means
        ``(K, dim)`` and sums of outer products ``(K, dim, dim)``.
    factors
        Each rung's proposal factor before its scale: the Cholesky factor of the last
        window's covariance estimate (``sigma_0^2 I`` before) plus the nugget,
        ``(K, dim, dim)``.
    window_swaps
        Per pair, the sum of its swap probabilities over the current warm-up window.
    swaps
        Per pair, the sum of its swap probabilities after warm-up.
    stone_lse, stone_lse2
        Per stone, the post-warm-up log-sum-exps of its log weights and of twice them.
    cold_acceptance, swap_acceptance
        Of the last transition: the cold rung's acceptance probability and the mean
        acceptance probability of the swaps tried.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = ("m2", "factors")

    step: int
    evaluations: int
    betas: FloatArray
    rung_positions: FloatArray
    rung_values: FloatArray
    rung_loglik: FloatArray
    log_scales: FloatArray
    count: int
    means: FloatArray
    m2: FloatArray
    factors: FloatArray
    window_swaps: FloatArray
    swaps: FloatArray
    stone_lse: FloatArray
    stone_lse2: FloatArray
    cold_acceptance: float
    swap_acceptance: float


make_params = params_parser(Params)


def geometric_ladder(temperatures: int, max_temperature: float) -> FloatArray:
    """``beta_k = max_temperature^(-k / (K - 1))``, ``k = 0 .. K - 1``."""
    k = temperatures - 1
    return frozen_array([pow1(max_temperature, -i / k) for i in range(temperatures)])


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    fields = new_chain_fields(position, seed=seed, chain=chain)
    k, d = params.temperatures, params.dim
    v0 = params.initial_scale * params.initial_scale
    factor = _cholesky(v0 * np.eye(d), params)
    assert factor is not None  # a positive multiple of the identity
    return State(
        **fields,
        step=0,
        evaluations=0,
        betas=geometric_ladder(k, params.max_temperature),
        rung_positions=frozen_array(np.tile(fields["position"], (k, 1))),
        rung_values=frozen_array(np.zeros(k)),
        rung_loglik=frozen_array(np.zeros(k)),
        log_scales=frozen_array(np.zeros(k)),
        count=0,
        means=frozen_array(np.zeros((k, d))),
        m2=frozen_array(np.zeros((k, d, d))),
        factors=frozen_array(np.tile(factor, (k, 1, 1))),
        window_swaps=frozen_array(np.zeros(k - 1)),
        swaps=frozen_array(np.zeros(k - 1)),
        stone_lse=frozen_array(np.full(k, -math.inf)),
        stone_lse2=frozen_array(np.full(k, -math.inf)),
        cold_acceptance=math.nan,
        swap_acceptance=math.nan,
    )


def _rung(state: State, params: Params) -> int:
    return params.temperatures - 1 - state.step


def _kind(state: State, params: Params) -> Literal["proposal", "tempered"]:
    return "proposal" if _rung(state, params) == 0 else "tempered"


def round_size(state: State, params: Params) -> int:
    """The rest of the chain's round (:mod:`core.populations.rounds`): the rest of the transition's
    rungs (each steps on its own; the swaps come after the last)."""
    return params.temperatures - state.step


def ask_ahead(state: State, params: Params, k: int) -> Proposal:
    """The proposal ``k`` evaluations after the outstanding one, within its round."""
    return ask(state.evolve(step=state.step + k), params)


def proposal_factor(state: State, params: Params, rung: int) -> FloatArray:
    """The lower Cholesky factor of rung ``rung``'s proposal covariance, ``am``'s
    ``lambda (2.38^2 / d) (Sigma + nugget sigma_0^2 I)``, with ``Sigma`` the rung's
    covariance from the last warm-up window that ended (``sigma_0^2 I`` before)."""
    scale = math.sqrt(exp1(float(state.log_scales[rung]))) * 2.38 / math.sqrt(params.dim)
    return np.asarray(state.factors[rung]) * scale


def _cholesky(sigma: FloatArray, params: Params) -> FloatArray | None:
    """The factor of ``sigma + nugget sigma_0^2 I``; ``None`` if it does not factor."""
    v0 = params.initial_scale * params.initial_scale
    try:
        return jittered_cholesky(sigma + params.nugget * v0 * np.eye(params.dim))
    except np.linalg.LinAlgError:
        return None


def ask(state: State, params: Params) -> Proposal:
    if state.logdensity is None:
        return Proposal(state.iteration, "init", state.position)
    t = state.iteration + 1
    rung = _rung(state, params)
    rng = generator(state.seed, state.chain, t, substream(Stream.PROPOSE, rung))
    z = rng.standard_normal(params.dim)
    current = np.asarray(state.rung_positions[rung])
    point = current + matvec(proposal_factor(state, params, rung), z)
    if not np.all(np.isfinite(point)):
        point = current  # an overflow: propose staying put (the kernel stays exact)
    return Proposal(t, _kind(state, params), frozen_array(point), 0.0, state.step)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    """The told log density: the ``"reference"`` mode's tell."""
    return _tell(state, params, proposal, *reference_split(params, proposal.position, logdensity))


def tell_parts(
    state: State, params: Params, proposal: Proposal, parts: Parts
) -> tuple[State, StepInfo]:
    """The told log prior (times ``prior_power``) and log likelihood: the
    ``"likelihood"`` mode's tell (in the ``"reference"`` mode, their sum is told)."""
    return _tell(state, params, proposal, *split_parts(params, proposal.position, parts))


def _tell(
    state: State, params: Params, proposal: Proposal, value: float, loglik: float
) -> tuple[State, StepInfo]:
    """A told value ``a + l`` and its ``l`` (``-inf``: outside the support, or a point the
    reference gives no density to)."""
    if state.logdensity is None:
        if proposal.kind != "init" or proposal.iteration != state.iteration:
            raise ValueError("proposal does not belong to this state")
        if value == -math.inf or loglik == -math.inf:  # waits for a new initial point
            return state, StepInfo(state.iteration, "outside_support", 0.0, True)
        k = params.temperatures
        new = state.evolve(
            logdensity=value,
            evaluations=state.evaluations + 1,
            step=0,
            rung_positions=frozen_array(np.tile(state.position, (k, 1))),
            rung_values=frozen_array(np.full(k, value)),
            rung_loglik=frozen_array(np.full(k, loglik)),
        )
        return new, StepInfo(state.iteration, "initialized", 1.0, True)
    t = state.iteration + 1
    if proposal.kind != _kind(state, params) or (proposal.iteration, proposal.step) != (
        t,
        state.step,
    ):
        raise ValueError("proposal does not belong to this state")
    rung = _rung(state, params)
    beta = float(state.betas[rung])
    u = float(generator(state.seed, state.chain, t, substream(Stream.ACCEPT, rung)).random())
    if value == -math.inf or loglik == -math.inf:
        prob, accepted = 0.0, False
    else:
        old_value, old_loglik = float(state.rung_values[rung]), float(state.rung_loglik[rung])
        # The rung's log density is a + beta l = value - (1 - beta) l.
        log_alpha = (value - (1.0 - beta) * loglik) - (old_value - (1.0 - beta) * old_loglik)
        if math.isnan(log_alpha):  # values near the float range: reject, as any sampler
            prob, accepted = 0.0, False
        else:
            log_alpha = min(0.0, log_alpha)
            prob, accepted = exp1(log_alpha), bool(log1(u) < log_alpha)
    positions, values, logliks = state.rung_positions, state.rung_values, state.rung_loglik
    if accepted:
        positions = np.array(positions)
        positions[rung] = proposal.position
        values, logliks = np.array(values), np.array(logliks)
        values[rung], logliks[rung] = value, loglik
        positions, values, logliks = map(frozen_array, (positions, values, logliks))
    log_scales = state.log_scales
    if t <= params.warmup:
        start = max((e for e in _window_ends(params) if e < t), default=0)
        scales = np.array(log_scales)
        scales[rung] = robbins_monro(
            float(scales[rung]), prob, params.target_acceptance, learning_rate(t, start=start)
        )
        log_scales = frozen_array(scales)
    moved = state.evolve(
        step=state.step + 1,
        evaluations=state.evaluations + 1,
        rung_positions=positions,
        rung_values=values,
        rung_loglik=logliks,
        log_scales=log_scales,
    )
    if rung > 0:
        return moved, StepInfo(t, "step", prob, t <= params.warmup)
    return _end(moved, params, t, accepted, prob)


def swap_probability(beta_i: float, beta_j: float, l_i: float, l_j: float) -> float:
    """``min(1, exp((beta_i - beta_j) (l_j - l_i)))``: the probability that rungs at
    ``beta_i`` and ``beta_j``, whose states have the log likelihoods ``l_i`` and ``l_j``,
    swap them."""
    log_alpha = (beta_i - beta_j) * (l_j - l_i)
    if math.isnan(log_alpha):
        return 0.0
    return exp1(min(0.0, log_alpha))


def _end(
    state: State, params: Params, t: int, accepted: bool, prob: float
) -> tuple[State, StepInfo]:
    """The transition's end, after the cold rung's step: the swaps, the draw, the
    warm-up's adaptation or the evidence's sums."""
    k = params.temperatures
    betas = np.asarray(state.betas)
    positions = np.array(state.rung_positions)
    values, logliks = np.array(state.rung_values), np.array(state.rung_loglik)
    uniforms = generator(state.seed, state.chain, t, Stream.MIX).random(k - 1)
    probs = np.empty(k - 1)
    tried: list[float] = []
    for i in range(k - 1):
        probs[i] = swap_probability(
            float(betas[i]), float(betas[i + 1]), float(logliks[i]), float(logliks[i + 1])
        )
    for i in range(t % 2, k - 1, 2):  # even transitions: (0, 1), (2, 3), ...; odd: (1, 2), ...
        # The pairs tried are disjoint: each one's probability is the one computed above.
        tried.append(float(probs[i]))
        if float(uniforms[i]) < probs[i]:
            positions[[i, i + 1]] = positions[[i + 1, i]]
            values[[i, i + 1]] = values[[i + 1, i]]
            logliks[[i, i + 1]] = logliks[[i + 1, i]]
    warm = t <= params.warmup
    changes: dict[str, Any] = {
        "position": frozen_array(positions[0]),
        "logdensity": float(values[0]),
        "iteration": t,
        "accepted": state.accepted + accepted,
        "step": 0,
        "rung_positions": frozen_array(positions),
        "rung_values": frozen_array(values),
        "rung_loglik": frozen_array(logliks),
        "cold_acceptance": prob,
        "swap_acceptance": float(np.mean(tried)) if tried else math.nan,
    }
    if warm:
        changes.update(_adapt(state, params, t, positions, probs))
    else:
        changes["swaps"] = frozen_array(state.swaps + probs)
        changes.update(_stones(state, betas, logliks))
    new: State = state.evolve(**changes)
    outcome: Literal["accepted", "rejected"] = "accepted" if accepted else "rejected"
    return new, StepInfo(t, outcome, prob, warm)


def _stones(state: State, betas: FloatArray, logliks: FloatArray) -> dict[str, FloatArray]:
    """The stepping stones' sums with this transition's rung states."""
    k = betas.size
    lse, lse2 = np.array(state.stone_lse), np.array(state.stone_lse2)
    for i in range(k):
        if i < k - 1:  # Z_{beta_i} / Z_{beta_{i+1}} from rung i + 1
            w = (float(betas[i]) - float(betas[i + 1])) * float(logliks[i + 1])
        else:  # Z_0 / Z_{beta_{K-1}} from the hottest rung
            w = -float(betas[i]) * float(logliks[i])
        lse[i] = _logaddexp(float(lse[i]), w)
        lse2[i] = _logaddexp(float(lse2[i]), 2.0 * w)
    return {"stone_lse": frozen_array(lse), "stone_lse2": frozen_array(lse2)}


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    top = max(a, b)
    return top + log1(exp1(a - top) + exp1(b - top))


def _window_ends(params: Params) -> tuple[int, ...]:
    """The warm-up iterations after which a new window starts (all but the last end)."""
    return window_ends(params.warmup, params.dim, minimum=params.start)[:-1]


def _adapt(
    state: State, params: Params, t: int, positions: FloatArray, probs: FloatArray
) -> dict[str, Any]:
    """The warm-up after a transition: the rungs' moments, and at a window's end their
    covariances, scales and the ladder. The last window (from ``warmup / 2``) adapts the
    scales alone, to the covariances and ladder that the chain keeps."""
    count = state.count + 1
    means, m2 = np.array(state.means), np.array(state.m2)
    with np.errstate(over="ignore", invalid="ignore"):
        delta = positions - means
        means = means + delta / count
        m2 = m2 + delta[:, :, None] * (positions - means)[:, None, :]  # per rung, outer
    window_swaps = np.asarray(state.window_swaps) + probs
    out: dict[str, Any] = {}
    if t in _window_ends(params):
        factors = np.array(state.factors)
        scales = np.array(state.log_scales)
        if count >= 2:
            for r in range(params.temperatures):
                estimate = m2[r] / (count - 1)
                if usable_covariance(estimate) and np.all(np.diagonal(estimate) > 0):
                    factor = _cholesky(0.5 * (estimate + estimate.T), params)
                    if factor is not None:
                        factors[r] = factor
                        scales[r] = 0.0  # the scale adapts afresh to the new shape
        out["factors"] = frozen_array(factors)
        out["log_scales"] = frozen_array(scales)
        if params.adapt_ladder and count >= 1:
            out["betas"] = adapt_ladder(np.asarray(state.betas), 1.0 - window_swaps / count)
        count = 0
        means = np.zeros_like(means)
        m2 = np.zeros_like(m2)
        window_swaps = np.zeros_like(window_swaps)
    out.update(
        count=count,
        means=frozen_array(means),
        m2=frozen_array(m2),
        window_swaps=frozen_array(window_swaps),
    )
    return out


def adapt_ladder(betas: FloatArray, rejection: FloatArray) -> FloatArray:
    """The ladder that divides the communication barrier evenly (Syed et al. 2021,
    Algorithm 4): ``betas`` from 1 down, ``rejection`` the rejection rate of each pair of
    neighbours. The barrier is piecewise linear in ``log beta`` between the rungs, rising
    by each pair's rate (plus a small floor) from the hottest rung to the cold one; the
    new rungs sit at equal steps of it. The ends stay."""
    b = np.asarray(betas, dtype=np.float64)[::-1]  # increasing, to 1
    r = np.clip(np.nan_to_num(np.asarray(rejection, dtype=np.float64)[::-1], nan=1.0), 0.0, 1.0)
    barrier = np.concatenate([[0.0], np.cumsum(r + _RATE_FLOOR)])
    targets = np.linspace(0.0, barrier[-1], b.size)
    # The module's exp and log: the same bits on every CPU, as the draws need.
    logs = arithmetic.log(b)
    new = arithmetic.exp(np.interp(targets, barrier, logs))
    new[0], new[-1] = b[0], 1.0
    new = np.maximum.accumulate(new)  # rounding aside, strictly increasing already
    return frozen_array(new[::-1])


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): per
    rung its state, mean, window sums, covariance and the proposal's factor, and the
    ladder's and stones' sums."""
    k = params.temperatures
    return 60 + k * (3 * dim * dim + 3 * dim + 10)


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
    stats=("cold_acceptance", "swap_acceptance"),
    multistep=True,
    pseudo_marginal_refusal=pseudo_marginal_refusal,
    needs_parts=needs_parts,
    chain_evidence=evidence_of,
    round_size=round_size,
    ask_ahead=ask_ahead,
)
