"""Kernel adaptive Metropolis-Hastings (KAMH, "MCMC Kameleon").

Sejdinovic, Strathmann, Lomeli Garcia, Andrieu and Gretton (2014), "Kernel adaptive
Metropolis-Hastings", ICML. A random walk whose covariance at ``y`` follows the
local covariance of a subsample ``Z = {z_1, ..., z_n}`` of the chain's history, seen
through the gradients of a Gaussian kernel ``k`` (bandwidth ``l``, see :mod:`core.kernels.rkhs`):

    q(. | y) = N(y, R_y),
    R_y = gamma^2 I + nu^2 (1/n) sum_i (g_i - g_mean)(g_i - g_mean)^T,
    g_i = l^2 grad_x k(x, z_i)|_{x=y} = k(y, z_i) (z_i - y).

``gamma`` is an isotropic nugget (a length). ``nu^2`` is dimensionless: the covariance
is an average over ``Z`` rather than the paper's sum, and ``g_i`` is the kernel-weighted
displacement rather than the gradient itself, so the same ``nu^2`` means the same
proposal scale for any subsample size ``n`` and bandwidth ``l``. In the paper's notation
(``M`` with columns ``2 grad k``, ``R = gamma^2 I + nu_p^2 M H M^T``) this is
``nu_p^2 = nu^2 l^4 / (4 n)``, i.e. the RKHS construction with ``beta ~ N(0, nu_p'^2/n I)``
and ``nu_p'^2 = nu^2 l^4 / 4``. For a very wide kernel ``g_i -> z_i - y`` and ``R_y``
becomes Adaptive Metropolis' ``gamma^2 I + nu^2 Cov(Z)``, hence the default
``nu^2 = 2.38^2 / d``.

Implementation notes, with the reference code's pitfalls fixed:

* With ``M`` the ``n x d`` matrix of rows ``grad_x k(y, z_i)`` and ``H = I - 1 1^T / n``,
  ``R_y = gamma^2 I + s M^T H M`` with ``s = nu^2 l^4 / n``; the centring ``H`` is kept.
  When ``d > n`` the proposal is drawn in ``O(n d)`` without forming ``R_y``:
  ``x* = y + gamma u + sqrt(s) M^T H v`` with ``u ~ N(0, I_d)`` and ``v ~ N(0, I_n)``;
  when ``d <= n`` the density needs the Cholesky factor ``L`` of ``R_y`` anyway, and
  ``x* = y + L e`` is cheaper.
* ``ask`` evaluates both proposal densities with the same ``(Z, l, nu^2)`` and returns
  ``log q(x | x*) - log q(x* | x)`` as the proposal's ``log_correction``; adaptation
  happens in ``tell`` after the accept decision, so the next ``ask`` sees the updated
  ``(Z, l, nu^2)`` in both densities.
* The log density uses a Cholesky factor of ``R_y`` when ``d <= n`` and the matrix
  determinant lemma with Woodbury's identity (an ``n x n`` factor, no ``d x d`` matrix)
  when ``d > n``; ``R_y`` is never inverted.
* ``Z`` is a reservoir sample (:mod:`core.tuning.reservoir`) of the chain's states after
  ``adapt_start``: a uniform subsample of the history in ``O(n d)`` memory.
* ``log nu^2`` follows a Robbins-Monro recursion on the clipped acceptance probability
  ``min(1, alpha)`` toward ``target_acceptance``.
* The current point's log density is cached in the state and never re-evaluated, so a
  noisy unbiased estimate of the density gives an exact pseudo-marginal chain.

Two departures from the paper, both for the short warm-ups of a service (the paper's
experiments adapt for 20 000 to 60 000 iterations), measured in BENCHMARKS.md, section 4
("KAMH's acceptance after warm-up"):

* **The subsample freezes before ``nu^2`` does** (``"warmup"`` adaptation). The paper
  replaces ``Z`` and adapts ``nu^2`` until the end of warm-up and then freezes both; the
  post-warm-up chain then runs with a ``nu^2`` tuned against subsamples it no longer
  has. Here the kernel part starts from the chain's last few states (a small, local
  ``Z``, whose kernel part is tiny), so Robbins-Monro first drives ``nu^2`` up by two
  orders of magnitude, and as ``Z`` spreads over the target its gain has fallen too far
  to bring ``nu^2`` back: on a 9-d Gaussian started outside its bulk it ended warm-up
  at 11 to 22, up to a few times what the frozen ``Z`` wants (:func:`subsample_freeze`). So ``Z`` (and its bandwidth) freezes
  three quarters of the way through the kernel method's warm-up, with the default
  preconditioning at the end of the map's last learning window, and ``nu^2`` adapts
  through the last quarter against exactly the proposal the chain keeps, with its
  Robbins-Monro gain restarted (as Stan restarts its step size's in each window).
* **The nugget scales with the dimension in whitened coordinates.** ``R_y``'s kernel part
  is large near ``Z`` and vanishes away from it; a ``Z`` gathered in a short warm-up
  (a few hundred correlated states, a few dozen independent draws) leaves parts of
  the target far from every ``z_i``, where ``R_y`` falls to ``gamma^2 I``. With the
  paper's ``gamma = 0.2`` (a quarter of the optimal random walk's step in 9 whitened
  dimensions), a chain there crawls, and a move between a point near ``Z`` and one
  away from it is rejected by the Hastings correction (``log det R_y`` spread over 17
  to 33 nats across the target). With preconditioning the target has about unit
  covariance in the kernel method's coordinates, and the default nugget is half the
  optimal random walk's step there, ``0.5 * 2.38 / sqrt(d)``: the floor under ``R_y``
  is then the same share of the target's scale in every dimension, and a chain away
  from ``Z`` still moves. Without preconditioning (the user's coordinates, whose scale
  the sampler does not know) the default stays 0.2.
"""

from __future__ import annotations

import dataclasses
import math
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
from kameleon.core.interface.memory import preconditioning_floats
from kameleon.core.interface.metropolis import metropolis_ask, metropolis_tell
from kameleon.core.interface.sampler import OptionError, Sampler, params_parser
from kameleon.core.kernels.kamh_proposal import (
    FACTORS,
    log_density_cholesky,
    log_density_whitened,
    log_density_woodbury,
    proposal_log_density,
    sample_proposal,
)
from kameleon.core.kernels.rkhs import gaussian_kernel_grad, median_bandwidth
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.matrices import matvec, solve_lower
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.tuning import preconditioning
from kameleon.core.tuning.adaptation import Welford, adapt_probability, learning_rate, robbins_monro
from kameleon.core.tuning.preconditioning import (
    PRECONDITIONING_COLD_FIELDS,
    Preconditioner,
    PreconditionOptions,
)
from kameleon.core.tuning.reservoir import reservoir_update

__all__ = [
    "NAME",
    "SAMPLER",
    "Params",
    "State",
    "ask",
    "chain_floats",
    "init",
    "log_density_cholesky",
    "log_density_woodbury",
    "make_params",
    "proposal_log_density",
    "sample_proposal",
    "tell",
]

NAME = "kameleon"

# Rows of the subsample that enter the median heuristic: the O(m^2 d) median is
# recomputed whenever the subsample changes (often, during warm-up), and 200 rows
# (19900 pairs) pin the median down to a few percent.
_MEDIAN_POINTS = 200
#: ``gamma`` without preconditioning: the reference code's, in the user's coordinates.
REFERENCE_GAMMA = 0.2
#: ``gamma`` in whitened coordinates, as a share of the optimal random walk's step
#: ``2.38 / sqrt(d)`` on a target of unit covariance (module docstring).
WHITENED_GAMMA_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Params(PreconditionOptions):
    """Options of KAMH: ``preconditioning``, ``precondition_iterations`` and
    ``initial_scale`` (:class:`core.tuning.preconditioning.PreconditionOptions`), and

    Attributes
    ----------
    subsample_size
        ``n``, the number of history points the proposal uses (default 1000).
    min_subsample
        The kernel part of the proposal is used once the subsample holds at least this
        many points (and, with the median heuristic, two distinct ones); before that the
        proposal is the random walk ``N(x, gamma^2 I)`` (default 10).
    gamma
        Standard deviation of the isotropic part of the proposal (the nugget), and of the
        random walk used before the subsample is large enough. Default: with
        preconditioning, ``0.5 * 2.38 / sqrt(dim)`` in the whitened coordinates, half the
        step of the optimal random walk on a target of unit covariance, so that where
        the kernel part vanishes (away from the subsample) the chain still moves as a
        random walk at a quarter of that walk's variance, in any dimension (a departure
        from the paper: see the module docstring); without preconditioning, 0.2, the
        reference value, which suits targets whose scales are between about 1 and 10
        (unit-scale Gaussians, the bananas B(0.03, 100) and B(0.1, 100) and the flower
        F(10, 6, 6, 1)). It is not adapted: choose it small compared with the target's
        scale, so that the kernel part can shape the proposal, but large enough for the
        initial random walk to move, and for the chain to move in the tails, where the
        kernel part vanishes.
    nu2
        Initial ``nu^2``, the dimensionless scale of the kernel part (default
        ``2.38^2 / dim``, see the module docstring).
    bandwidth
        Fixed Gaussian-kernel bandwidth ``l`` of ``exp(-||x - y||^2 / (2 l^2))``;
        default: the median heuristic on the subsample, recomputed whenever the
        subsample changes.
    adapt_scale
        Adapt ``nu^2`` toward ``target_acceptance`` (default true).
    target_acceptance
        Target of the ``nu^2`` adaptation (default 0.234).
    adaptation
        ``"warmup"`` (default, the paper's choice): the subsample is a reservoir sample
        of the warm-up history after ``adapt_start``; it freezes three quarters of the
        way from there to the end of warm-up, ``nu^2`` adapts against the frozen
        subsample through the last quarter, and both stay fixed after warm-up (a
        departure from the paper, whose subsample changes until the end of warm-up: see
        the module docstring). ``"diminishing"``: the reservoir keeps sampling the whole
        history after ``adapt_start``, and each iteration, with a probability that
        vanishes (:func:`core.tuning.adaptation.adapt_probability`), the proposal's subsample
        is replaced by the reservoir and ``nu^2`` is adapted.
    adapt_start
        Iterations of the plain random walk before the history is collected and
        anything adapts (default 0; the reference code uses 500).
    """

    dim: int
    warmup: int
    subsample_size: int = 1000
    min_subsample: int = 10
    gamma: float | None = None
    nu2: float | None = None
    bandwidth: float | None = None
    adapt_scale: bool = True
    target_acceptance: float = 0.234
    adaptation: Literal["warmup", "diminishing"] = "warmup"
    adapt_start: int = 0

    def __post_init__(self) -> None:
        self.check()
        if self.subsample_size < 2:
            raise OptionError("subsample_size", "must be at least 2")
        if not 2 <= self.min_subsample <= self.subsample_size:
            raise OptionError("min_subsample", "must be between 2 and subsample_size")
        if self.gamma is not None and not self.gamma > 0:
            raise OptionError("gamma", "must be positive")
        if self.nu2 is not None and not self.nu2 > 0:
            raise OptionError("nu2", "must be positive")
        if self.bandwidth is not None and not self.bandwidth > 0:
            raise OptionError("bandwidth", "must be positive")
        if not 0 < self.target_acceptance < 1:
            raise OptionError("target_acceptance", "must be in (0, 1)")
        if self.adapt_start < 0:
            raise OptionError("adapt_start", "must be non-negative")

    @property
    def initial_nu2(self) -> float:
        return self.nu2 if self.nu2 is not None else 2.38 * 2.38 / self.dim

    @property
    def nugget(self) -> float:
        """``gamma`` (see ``gamma``): as given, else by the coordinates the kernel
        method works in."""
        if self.gamma is not None:
            return self.gamma
        if preconditioning.scouting_iterations(self) == 0:
            return REFERENCE_GAMMA
        return WHITENED_GAMMA_SHARE * 2.38 / math.sqrt(self.dim)


@register("kameleon.State")
@dataclass(frozen=True, slots=True)
class State(ChainState):
    """A KAMH chain.

    Attributes
    ----------
    log_nu2
        ``log nu^2`` (see the module docstring).
    reservoir
        Reservoir sample of the collected history, shape ``(min(history_size, n), d)``.
    history_size
        How many states were offered to the reservoir.
    subsample
        The proposal's subsample ``Z``: ``None`` in ``"warmup"`` mode, where ``Z`` is the
        reservoir itself; in ``"diminishing"`` mode, the reservoir as it was at the last
        refresh.
    bandwidth
        The kernel bandwidth for ``Z``; ``None`` while ``Z`` is too small for the kernel
        part, which makes the proposal the plain random walk.
    """

    COLD_FIELDS: ClassVar[tuple[str, ...]] = (
        "reservoir",
        "subsample",
        *PRECONDITIONING_COLD_FIELDS,
    )

    log_nu2: float
    reservoir: FloatArray
    history_size: int
    subsample: FloatArray | None
    bandwidth: float | None
    scout_log_lambda: float
    scout_moments: Welford
    scout_factor: FloatArray | None
    preconditioner: Preconditioner | None
    # Added later: a document written before has none (then the window's estimate is
    # made at its next refresh, core.tuning.preconditioning.refreshes).
    scout_running: FloatArray | None = dataclasses.field(default=None, kw_only=True)


make_params = params_parser(Params)


def init(position: Any, params: Params, *, seed: int, chain: int) -> State:
    reservoir = frozen_array(np.empty((0, params.dim)))
    return State(
        **new_chain_fields(position, seed=seed, chain=chain),
        log_nu2=log1(params.initial_nu2),
        reservoir=reservoir,
        history_size=0,
        subsample=None if params.adaptation == "warmup" else reservoir,
        bandwidth=None,
        **preconditioning.initial_fields(params.dim),
    )


def _proposal_subsample(state: State) -> FloatArray:
    return state.reservoir if state.subsample is None else state.subsample


def _subsample_bandwidth(Z: FloatArray, params: Params, rng: np.random.Generator) -> float | None:
    """The bandwidth for the subsample ``Z``, or ``None`` if ``Z`` is too small to use."""
    if Z.shape[0] < params.min_subsample:
        return None
    if params.bandwidth is not None:
        return params.bandwidth
    try:
        return median_bandwidth(Z, rng, max_points=_MEDIAN_POINTS)
    except ValueError:  # no two distinct points (among those drawn) yet
        return None


# --------------------------------------------------------------------------- steps


def ask(state: State, params: Params) -> Proposal:
    return preconditioning.ask(state, params, _kernel_ask)


def tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    return preconditioning.tell(
        state, params, proposal, logdensity, _kernel_tell, _handover, _remap
    )


def _handover(state: State, params: Params) -> State:
    """Scouting ended: ``nu^2`` starts from the scouting scale (for a wide kernel the
    kernel part is ``nu^2 Cov(Z)``, and ``Cov(Z)`` is about ``I`` in whitened coordinates)."""
    log_nu2 = log1(params.initial_nu2) + state.scout_log_lambda
    return dataclasses.replace(state, log_nu2=log_nu2)


def _remap(state: State, params: Params, old: Preconditioner) -> State:
    """The map changed in warm-up (:func:`core.tuning.preconditioning.learn`): the history and
    the subsample, kept whitened, are whitened by the new map instead, and the
    bandwidth is the median heuristic's on them."""
    new = state.preconditioner
    assert new is not None
    reservoir = preconditioning.rewhiten(state.reservoir, old, new)
    subsample = state.subsample
    if subsample is not None:
        subsample = preconditioning.rewhiten(subsample, old, new)
    Z = reservoir if subsample is None else subsample
    bandwidth = state.bandwidth
    if bandwidth is not None:
        rng = generator(state.seed, state.chain, state.iteration, Stream.ADAPT)
        bandwidth = _subsample_bandwidth(Z, params, rng)
    return dataclasses.replace(state, reservoir=reservoir, subsample=subsample, bandwidth=bandwidth)


def _kernel_ask(state: State, params: Params) -> Proposal:
    return metropolis_ask(state, params, _propose)


def _propose(state: State, params: Params, rng: np.random.Generator) -> tuple[FloatArray, float]:
    x = state.position
    if state.bandwidth is None:
        return x + params.nugget * rng.standard_normal(params.dim), 0.0
    Z = _proposal_subsample(state)
    bandwidth = state.bandwidth
    gamma = params.nugget
    gamma2 = gamma * gamma
    bandwidth2 = bandwidth * bandwidth
    scale2 = exp1(state.log_nu2) * (bandwidth2 * bandwidth2) / Z.shape[0]
    if params.dim <= Z.shape[0]:
        # Both densities by Cholesky factors of R at x and at x*; the factor at x was
        # usually computed by the previous ask (x was its x* or its x).
        L, log_det = FACTORS.get(x, Z, bandwidth, gamma2, scale2)
        e = rng.standard_normal(size=(params.dim,))
        step = matvec(L, e)
        log_q_forward = log_density_whitened(e, log_det)
        x_new = x + step
        L_new, log_det_new = FACTORS.get(x_new, Z, bandwidth, gamma2, scale2)
        log_q_backward = log_density_whitened(solve_lower(L_new, -step), log_det_new)
    else:
        M = gaussian_kernel_grad(x, Z, bandwidth)
        step, log_q_forward = sample_proposal(rng, gamma, scale2, M)
        x_new = x + step
        M_new = gaussian_kernel_grad(x_new, Z, bandwidth)
        log_q_backward = log_density_woodbury(-step, gamma2, scale2, M_new)
    return x_new, log_q_backward - log_q_forward


def _kernel_tell(
    state: State, params: Params, proposal: Proposal, logdensity: float
) -> tuple[State, StepInfo]:
    return metropolis_tell(state, params, proposal, logdensity, _kernel_adapt)


def _kernel_adapt(
    state: State, new: State, params: Params, proposal: Proposal, info: StepInfo, u_adapt: float
) -> State:
    t = info.iteration
    collecting = t > preconditioning.kernel_start(params) and (
        params.adaptation == "diminishing" or t <= params.warmup
    )
    if not collecting:
        return new
    if params.adaptation == "warmup" and t > subsample_freeze(params):
        return _adapt_scale(new, state, params, info.acceptance_probability)
    adapting = u_adapt < _adapt_probability(t, params)
    return _adapt(new, state, params, info.acceptance_probability, adapting)


def subsample_freeze(params: Params) -> int:
    """The iteration after which, in ``"warmup"`` mode, the subsample is frozen and only
    ``nu^2`` adapts, against it, until the end of warm-up: three quarters of the way from
    :func:`core.tuning.preconditioning.kernel_start` to the end of warm-up (with the
    default preconditioning, the end of the map's last learning window)."""
    start = preconditioning.kernel_start(params)
    return start + 3 * max(0, params.warmup - start) // 4


def _adapt_scale(new: State, old: State, params: Params, prob: float) -> State:
    """The final warm-up window (after :func:`subsample_freeze`): ``Z`` and the bandwidth
    stay as they are, and ``nu^2`` adapts with a Robbins-Monro gain restarted at the
    window's start, so that it settles on the proposal the chain keeps after warm-up."""
    if not params.adapt_scale or old.bandwidth is None:
        return new
    rate = learning_rate(new.iteration, start=subsample_freeze(params))
    log_nu2 = robbins_monro(old.log_nu2, prob, params.target_acceptance, rate)
    return dataclasses.replace(new, log_nu2=log_nu2)


def _adapt_probability(t: int, params: Params) -> float:
    return adapt_probability(
        t, warmup=params.warmup, mode=params.adaptation, start=preconditioning.kernel_start(params)
    )


def _adapt(new: State, old: State, params: Params, prob: float, adapting: bool) -> State:
    """Offer ``new.position`` to the reservoir; if ``adapting``, refresh ``Z`` and ``nu^2``.

    ``nu^2`` only adapts when the proposal used it (the kernel part was active).
    """
    t = new.iteration
    rng = generator(new.seed, new.chain, t, Stream.ADAPT)
    reservoir = reservoir_update(
        old.reservoir, old.history_size, new.position, params.subsample_size, rng
    )
    log_nu2 = old.log_nu2
    if adapting and params.adapt_scale and old.bandwidth is not None:
        rate = learning_rate(t, start=preconditioning.kernel_start(params))
        log_nu2 = robbins_monro(log_nu2, prob, params.target_acceptance, rate)
    subsample = old.subsample
    if params.adaptation == "diminishing" and adapting and not _same_rows(reservoir, subsample):
        subsample = reservoir
    Z = reservoir if subsample is None else subsample
    bandwidth = old.bandwidth
    if Z is not _proposal_subsample(old):
        bandwidth = _subsample_bandwidth(Z, params, rng)
    return dataclasses.replace(
        new,
        log_nu2=log_nu2,
        reservoir=reservoir,
        history_size=old.history_size + 1,
        subsample=subsample,
        bandwidth=bandwidth,
    )


def _same_rows(a: FloatArray, b: FloatArray | None) -> bool:
    return a is b or (b is not None and a.shape == b.shape and bool(np.array_equal(a, b)))


def chain_floats(dim: int, params: Params) -> int:
    """The floats one chain keeps and works with, at most (:mod:`core.interface.memory`): the
    reservoir and subsample, kernel gradients at two points, the d x d proposal
    covariance and factor (d <= n) or the n x n Woodbury matrices (d > n), and the
    preconditioning's."""
    n = int(params.subsample_size)
    inner = 2 * dim * dim if dim <= n else 2 * n * n
    return preconditioning_floats(dim, params) + 4 * n * dim + inner


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
)
