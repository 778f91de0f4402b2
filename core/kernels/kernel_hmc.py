"""Kernel Hamiltonian Monte Carlo: the machinery shared by ``kmc-lite`` and ``kmc-finite``.

Kernel HMC (Strathmann, Sejdinovic, Livingstone, Szabo and Gretton 2015,
"Gradient-free Hamiltonian Monte Carlo with efficient kernel exponential families")
proposes by running leapfrog on the gradient of a surrogate ``f ~ log pi`` fitted to the
chain's history by score matching (:mod:`core.kernels.score_matching`), and accepts with the
true, or pseudo-marginal estimated, log density: one evaluation per iteration and no
gradient from the client.

One iteration from ``x``:

1. ``ask``: draw ``p0 ~ N(0, I)``, the number of steps ``L ~ U{L_min..L_max}`` and the
   step size ``eps = eps_bar * U[1 - j, 1 + j]`` from the proposal stream (independent of
   the state, which keeps the chain valid), run ``L`` leapfrog steps of ``eps`` on
   ``grad f`` from ``(x, p0)`` to ``(x*, p*)`` and propose ``x*`` with
   ``log_correction = log N(p*) - log N(p0)``, the kinetic-energy change. With a
   Gaussian momentum no momentum flip is needed.
2. ``tell``: accept with probability ``min(1, pi(x*) N(p*) / (pi(x) N(p0)))`` using the
   cached log density of ``x`` (for pseudo-marginal targets, the estimate told when
   ``x`` was accepted); then adapt (below).

Until the surrogate is fitted the proposal is the Gaussian random walk
``x* = x + s N(0, I)``, with ``s`` adapted toward an acceptance of 0.234; the history
for the first fit is gathered meanwhile. At the first fit the leapfrog step size starts
at ``s`` (unless the ``step_size`` option is set): the adapted random-walk scale is of
the order of the target's scale over ``sqrt(d)``, as a stable leapfrog step is.

Adaptation (modes as in :mod:`core.tuning.adaptation`). The history is every chain state of the
warm-up (``"warmup"``) or of the whole run (``"diminishing"``). With the adaptation
probability ``p_t`` (1 during warm-up in ``"warmup"`` mode, ``t^-1/2`` in
``"diminishing"`` mode) an iteration adapts the random-walk scale or the step size by
Robbins-Monro on a clipped acceptance probability, and the variant decides how the state
enters its surrogate (see :mod:`core.samplers.kmc_lite`, :mod:`core.samplers.kmc_finite`).
In ``"warmup"`` mode the surrogate is brought up to date at the last warm-up iteration
and then frozen, so the post-warm-up chain is an exact Markov chain.

The step size is adapted on ``min(1, exp(-dH))``, where ``dH = f(x) - f(x*) -
log_correction`` is the leapfrog's energy error on the surrogate's own Hamiltonian
``-f(q) + ||p||^2 / 2``, not on the true acceptance probability. The step size governs
the discretisation error, which ``dH`` measures; the true acceptance also pays for the
surrogate's misfit, which no step size removes. The reference code adapts on the true
acceptance, and then every misfit that alone holds the acceptance below the target
(the first fits, from a short history, always do) drives ``eps`` toward 0, the chain
stops exploring and the history, and so the surrogate, never improves: on a correlated
8-dimensional Gaussian the effective sample size per iteration was then below the
random walk's, and ten times higher with this rule. For an exact surrogate both rules
coincide.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from kameleon.core.interface.chain import (
    ChainState,
    FloatArray,
    Proposal,
    StepInfo,
    new_chain_fields,
)
from kameleon.core.interface.metropolis import metropolis_ask, metropolis_tell
from kameleon.core.interface.sampler import OptionError
from kameleon.core.kernels.rkhs import median_bandwidth
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.matrices import dot
from kameleon.core.tuning import preconditioning
from kameleon.core.tuning.adaptation import Welford, adapt_probability, learning_rate, robbins_monro
from kameleon.core.tuning.preconditioning import (
    PRECONDITIONING_COLD_FIELDS,
    Preconditioner,
    PreconditionOptions,
)

__all__ = [
    "PRECONDITIONING_COLD_FIELDS",
    "RW_TARGET_ACCEPTANCE",
    "Collect",
    "KMCParams",
    "KMCState",
    "Surrogate",
    "ask",
    "default_bandwidth",
    "initial_fields",
    "leapfrog",
    "tell",
]

RW_TARGET_ACCEPTANCE = 0.234  # of the random walk used before the surrogate is fitted


@dataclass(frozen=True, slots=True)
class KMCParams(PreconditionOptions):
    """Options shared by the kernel HMC variants: ``preconditioning``,
    ``precondition_iterations`` and ``initial_scale``
    (:class:`core.tuning.preconditioning.PreconditionOptions`), and

    Attributes
    ----------
    min_history
        History points needed before the surrogate is first fitted; until then the
        proposal is a random walk (default 100). In ``"warmup"`` mode a chain whose
        warm-up is shorter stays a random walk.
    bandwidth
        Fixed bandwidth ``l`` of the Gaussian kernel ``exp(-||x - y||^2 / (2 l^2))``;
        default: from the median pairwise distance of the history points the fit uses
        (:func:`default_bandwidth`; see each variant).
    num_steps_min, num_steps_max
        Range of the number of leapfrog steps ``L``, drawn uniformly per proposal
        (defaults 10 and 50; the reference code uses 10 and 100). Each step costs one
        surrogate gradient.
    step_size
        Initial centre ``eps_bar`` of the step-size range; default: the adapted
        random-walk scale when the surrogate is first fitted.
    step_size_jitter
        ``j`` in ``eps ~ eps_bar U[1 - j, 1 + j]``, in ``[0, 1)`` (default 0.5). Random
        step sizes and step counts avoid periodic trajectories.
    rw_scale
        Initial random-walk scale ``s`` (default ``2.38 / sqrt(dim)``).
    adapt_step_size
        Adapt ``s`` toward an acceptance of 0.234, then ``eps_bar`` toward
        ``target_acceptance`` (default true).
    target_acceptance
        Target of the step-size adaptation, the mean of ``min(1, exp(-dH))`` for the
        leapfrog's energy error ``dH`` on the surrogate (default 0.8; see the module
        docstring). The true acceptance rate is lower by the surrogate's misfit.
    adaptation
        ``"warmup"`` (default): adapt during warm-up only; ``"diminishing"``: keep
        adapting with vanishing probability.
    """

    dim: int
    warmup: int
    min_history: int = 100
    bandwidth: float | None = None
    num_steps_min: int = 10
    num_steps_max: int = 50
    step_size: float | None = None
    step_size_jitter: float = 0.5
    rw_scale: float | None = None
    adapt_step_size: bool = True
    target_acceptance: float = 0.8
    adaptation: Literal["warmup", "diminishing"] = "warmup"

    def __post_init__(self) -> None:
        self.check()
        if self.min_history < 2:
            raise OptionError("min_history", "must be at least 2")
        if self.bandwidth is not None and not self.bandwidth > 0:
            raise OptionError("bandwidth", "must be positive")
        if self.num_steps_min < 1:
            raise OptionError("num_steps_min", "must be at least 1")
        if self.num_steps_max < self.num_steps_min:
            raise OptionError("num_steps_max", "must be at least num_steps_min")
        if self.step_size is not None and not self.step_size > 0:
            raise OptionError("step_size", "must be positive")
        if not 0 <= self.step_size_jitter < 1:
            raise OptionError("step_size_jitter", "must be in [0, 1)")
        if self.rw_scale is not None and not self.rw_scale > 0:
            raise OptionError("rw_scale", "must be positive")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")

    @property
    def initial_rw_scale(self) -> float:
        return self.rw_scale if self.rw_scale is not None else 2.38 / math.sqrt(self.dim)

    def is_collecting(self, iteration: int) -> bool:
        """Whether the state after ``iteration`` belongs to the history."""
        return iteration > preconditioning.kernel_start(self) and (
            self.adaptation == "diminishing" or iteration <= self.warmup
        )

    def is_last_warmup(self, iteration: int) -> bool:
        """Whether ``iteration`` is the last one before the surrogate freezes."""
        return self.adaptation == "warmup" and iteration == self.warmup


@dataclass(frozen=True, slots=True)
class KMCState(ChainState):
    """Fields shared by the kernel HMC variants' states.

    Attributes
    ----------
    log_rw_scale
        ``log s``, the random walk's scale before the surrogate is fitted.
    log_step_size
        ``log eps_bar``, the centre of the step-size range.
    bandwidth
        The surrogate's kernel bandwidth; ``None`` until the surrogate is first fitted,
        which makes the proposal the random walk.
    """

    log_rw_scale: float
    log_step_size: float
    bandwidth: float | None
    scout_log_lambda: float
    scout_moments: Welford
    scout_factor: FloatArray | None
    preconditioner: Preconditioner | None
    # Added later: a document written before has none (then the window's estimate is
    # made at its next refresh, core.tuning.preconditioning.refreshes).
    scout_running: FloatArray | None = dataclasses.field(default=None, kw_only=True)


S = TypeVar("S", bound=KMCState)


class Surrogate(Protocol):
    """A fitted surrogate ``f ~ log pi`` (:mod:`core.kernels.score_matching`)."""

    def logdensity(self, x: FloatArray) -> float: ...

    def gradient(self, x: FloatArray) -> FloatArray: ...


Collect = Callable[[S, KMCParams, float], S]
"""A variant's history update ``collect(state, params, adapt_weight)``: enter
``state.position`` (the state after iteration ``state.iteration``) into the surrogate's
statistics and refit when due. ``adapt_weight`` is ``1 / p_t`` if the iteration adapts
(``p_t`` its adaptation probability), else 0."""


def initial_fields(position: Any, params: KMCParams, *, seed: int, chain: int) -> dict[str, Any]:
    """The shared fields of a new chain's state."""
    log_rw_scale = log1(params.initial_rw_scale)
    return {
        **new_chain_fields(position, seed=seed, chain=chain),
        "log_rw_scale": log_rw_scale,
        "log_step_size": log_rw_scale if params.step_size is None else log1(params.step_size),
        "bandwidth": None,
        **preconditioning.initial_fields(params.dim),
    }


def handover(state: S, params: KMCParams) -> S:
    """Scouting ended: the random walk and the leapfrog step start from the scouting
    scale per whitened coordinate."""
    log_scale = preconditioning.scouting_log_scale(state)
    log_step_size = log_scale if params.step_size is None else state.log_step_size
    return dataclasses.replace(state, log_rw_scale=log_scale, log_step_size=log_step_size)


def default_bandwidth(points: FloatArray, rng: np.random.Generator) -> float | None:
    """The median pairwise distance of ``points`` as the bandwidth ``l``, or ``None`` if
    they hold fewer than two distinct points.

    This is ``sqrt(2)`` times :func:`core.kernels.rkhs.median_bandwidth`: the median heuristic in
    the form ``k = exp(-||x - y||^2 / (2 median^2))``. Score matching fits the smooth,
    roughly quadratic log densities around a mode better with this wider kernel than
    with ``exp(-||x - y||^2 / median^2)``: on correlated Gaussians in 2 to 8 dimensions
    the surrogate's gradient direction is closer to the truth, most of all in low
    dimension, where the median distance is small compared with the spread.
    """
    try:
        return math.sqrt(2.0) * median_bandwidth(points, rng)
    except ValueError:  # no two distinct points
        return None


def leapfrog(
    position: FloatArray,
    momentum: FloatArray,
    gradient: Callable[[FloatArray], FloatArray],
    step_size: float,
    num_steps: int,
) -> tuple[FloatArray, FloatArray]:
    """``num_steps`` leapfrog steps for ``H(q, p) = -f(q) + ||p||^2 / 2``.

    ``p <- p + (eps/2) grad f(q)``, then ``num_steps`` times ``q <- q + eps p`` and
    ``p <- p + eps grad f(q)``, the last momentum step halved. Volume preserving and
    reversible: from ``(q*, -p*)`` the same steps lead back to ``(q, -p)``.

    Parameters
    ----------
    position, momentum
        The start ``(q, p)``, shape ``(d,)``; not modified.
    gradient
        ``grad f``, the gradient of the log density (or of its surrogate).
    step_size, num_steps
        ``eps > 0`` and ``L >= 1``.

    Returns
    -------
    position, momentum
        The end ``(q*, p*)``, new arrays.
    """
    q = np.array(position, dtype=np.float64)
    # A trajectory that overflows ends non-finite, and its proposal is replaced by
    # staying put (core.interface.metropolis.metropolis_ask): no warning on the way.
    with np.errstate(over="ignore", invalid="ignore"):
        p = momentum + 0.5 * step_size * gradient(q)
        for step in range(num_steps):
            q += step_size * p
            p += (step_size if step < num_steps - 1 else 0.5 * step_size) * gradient(q)
    return q, p


def ask(state: KMCState, params: KMCParams, surrogate: Surrogate | None) -> Proposal:
    """The next proposal: HMC on ``surrogate``, or the random walk if it is ``None``."""

    def propose(
        state: KMCState, params: KMCParams, rng: np.random.Generator
    ) -> tuple[FloatArray, float]:
        if surrogate is None:
            return state.position + exp1(state.log_rw_scale) * rng.standard_normal(params.dim), 0.0
        p0 = rng.standard_normal(params.dim)
        num_steps = int(rng.integers(params.num_steps_min, params.num_steps_max + 1))
        jitter = params.step_size_jitter
        step_size = exp1(state.log_step_size) * rng.uniform(1.0 - jitter, 1.0 + jitter)
        q, p = leapfrog(state.position, p0, surrogate.gradient, step_size, num_steps)
        return q, 0.5 * (dot(p0, p0) - dot(p, p))

    return metropolis_ask(state, params, propose)


def tell(
    state: S,
    params: KMCParams,
    proposal: Proposal,
    logdensity: float,
    surrogate: Surrogate | None,
    collect: Collect[S],
) -> tuple[S, StepInfo]:
    """Accept or reject ``proposal`` (made by :func:`ask` with ``surrogate``), adapt the
    scales and let ``collect`` update the surrogate."""

    def adapt(
        state: S, new: S, params: KMCParams, proposal: Proposal, info: StepInfo, u_adapt: float
    ) -> S:
        t = info.iteration
        prob = info.acceptance_probability
        if not params.is_collecting(t):
            return new
        start = preconditioning.kernel_start(params)
        p_adapt = adapt_probability(t, warmup=params.warmup, mode=params.adaptation, start=start)
        adapting = u_adapt < p_adapt
        if adapting and params.adapt_step_size:
            rate = learning_rate(t, start=start)
            if surrogate is None:
                log_rw_scale = robbins_monro(state.log_rw_scale, prob, RW_TARGET_ACCEPTANCE, rate)
                new = dataclasses.replace(new, log_rw_scale=log_rw_scale)
            else:
                energy_error = (
                    surrogate.logdensity(state.position)
                    - surrogate.logdensity(proposal.position)
                    - proposal.log_correction
                )
                leapfrog_prob = exp1(-max(0.0, energy_error))
                log_step_size = robbins_monro(
                    state.log_step_size, leapfrog_prob, params.target_acceptance, rate
                )
                new = dataclasses.replace(new, log_step_size=log_step_size)
        new = collect(new, params, 1.0 / p_adapt if adapting else 0.0)
        if state.bandwidth is None and new.bandwidth is not None and params.step_size is None:
            new = dataclasses.replace(new, log_step_size=new.log_rw_scale)
        return new

    return metropolis_tell(state, params, proposal, logdensity, adapt)


def variant(
    surrogate: Callable[[S], Surrogate | None],
    collect: Collect[S],
    remap: preconditioning.Remap,
) -> tuple[Callable[[S, Any], Proposal], Callable[[S, Any, Proposal, float], tuple[S, StepInfo]]]:
    """The ``ask`` and ``tell`` of a kernel HMC variant, from how it builds its surrogate
    from a state, how it enters a state into its history and how it carries its history
    over to a new preconditioner in warm-up: :func:`ask` and :func:`tell` on that
    surrogate, inside the preconditioning (:mod:`core.tuning.preconditioning`)."""

    def kernel_ask(state: S, params: Any) -> Proposal:
        return ask(state, params, surrogate(state))

    def kernel_tell(
        state: S, params: Any, proposal: Proposal, logdensity: float
    ) -> tuple[S, StepInfo]:
        return tell(state, params, proposal, logdensity, surrogate(state), collect)

    def variant_ask(state: S, params: Any) -> Proposal:
        return preconditioning.ask(state, params, kernel_ask)

    def variant_tell(
        state: S, params: Any, proposal: Proposal, logdensity: float
    ) -> tuple[S, StepInfo]:
        new: S
        new, info = preconditioning.tell(
            state, params, proposal, logdensity, kernel_tell, handover, remap
        )
        return new, info

    return variant_ask, variant_tell
