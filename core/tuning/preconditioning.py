"""Affine preconditioning for the kernel samplers: their results do not depend on the
units of the coordinates.

A Gaussian kernel has one bandwidth, and a Gaussian random walk one scale. On a target
whose coordinates have scales 1e-3 and 1e2, or that is strongly correlated, neither fits:
the kernel samplers of the papers then crawl along the wide directions while looking
converged. The remedy here is the one a statistician applies by hand, done adaptively in
warm-up:

1. **Scouting** (warm-up iterations ``1..w``, ``w = precondition_iterations``, by default
   half the warm-up): the chain is Adaptive Metropolis (Haario et al. 2001, with the global
   scale of Andrieu and Thoms 2008, Algorithm 4), ``x* = x + N(0, lambda s_d Sigma)``,
   ``s_d = 2.38^2 / d``. ``Sigma`` is the covariance of the chain's states in the current
   window, shrunk toward the previous window's estimate as the map is (point 2), kept in
   the state and re-estimated every ``max(10, d)`` states (:func:`refreshes`; Adaptive
   Metropolis re-estimates at every step, but the shrinkage may need an
   eigendecomposition). The windows double in length and end at
   ``w / 32, w / 16, ..., w / 2, w`` (:func:`window_ends`); each starts from the previous
   one's covariance, so a scale that the first proposals got wrong by orders of magnitude
   is corrected geometrically, and the last half of scouting estimates the scale from a
   chain that has found the target's mass. Until a window holds enough states, the
   proposal uses the previous window's estimate, or ``initial_scale^2 I`` at first.
2. At the end of iteration ``w`` the **preconditioner** is set: the shift ``m`` (the
   window's mean) and the lower Cholesky factor ``L`` of its regularised covariance,
   ``Sigma = L L^T`` (``"dense"``, the default; ``"diagonal"`` keeps its diagonal only).
   Each window's covariance is shrunk toward the previous window's estimate, which
   weighs as ``d / 2`` independent draws against the window's
   (:func:`core.tuning.shrinkage.window_weight`), so that a window of a few hundred
   correlated random-walk states, or one that moved along a few directions only, cannot
   collapse the estimate in the others. The shrinkage is along the window's principal
   directions in the previous estimate's whitened coordinates
   (:func:`core.tuning.shrinkage.shrunk_factor`), so it does not depend on the
   coordinates: linear, except in scouting along a direction narrower than sampling
   noise explains, which is followed in logarithms
   (:func:`core.tuning.shrinkage.shrink_ratios`), so that a first guess in the wrong
   units, or a far start's drift, is forgotten geometrically.
3. **The kernel method** runs from iteration ``w + 1`` on in whitened coordinates
   ``u = W(x) = L^-1 (x - m)``: its history, bandwidth (median heuristic), random-walk
   scales, kernel-HMC step sizes and nugget ``gamma`` are all those of ``u``, where the
   target has roughly unit covariance whatever the user's units. A proposal ``u*`` is
   handed out as ``x* = C(u*) = m + L u*``.
   **The map keeps learning through warm-up**: a scouting run of half the warm-up has
   often not yet found the covariance of a target whose axes are rotated and whose
   scales differ (a kernel method whitened by it then mixes like a random walk). So the
   chain's states after scouting, in the user's coordinates, enter windows that end at
   ``w + K/8, w + K/4, w + K/2, w + 3K/4`` (``K`` the warm-up left after scouting,
   :func:`learning_window_ends`); at the end of each, ``(m, L)`` is re-estimated from
   the window (shrunk toward the current map in the same way), and the kernel method's whitened fields
   are carried over (``remap``): its history is whitened by the new map
   (:func:`rewhiten`, the same points in ``x``), a surrogate is refitted, or, for KMC
   finite, whose statistics cannot be transformed, fitted anew. The last quarter of
   warm-up adapts the kernel method's scales to the final map, which then never
   changes.
4. **A random-walk share**: after scouting, each iteration is, with probability
   ``random_walk_probability`` (default 0.1, a coin from its own stream), a random-walk
   Metropolis step along the last scouting window's covariance instead of the kernel
   method's (:func:`is_random_walk`). A mixture of kernels that each leave the target
   invariant, chosen independently of the state, leaves it invariant. It keeps the chain
   exploring where the kernel method's fit, learnt from the warm-up history, has not been:
   a kernel HMC surrogate pulls its trajectories back into the region it was fitted on.

Why every acceptance ratio stays right. Let ``q_u(u* | u)`` be the kernel method's
proposal density in whitened coordinates, and ``x = C(u)``, ``x* = C(u*)``. ``C`` is
affine with the constant Jacobian ``det L``, so the density of ``x*`` given ``x`` is
``q_x(x* | x) = q_u(W(x*) | W(x)) / det L``, and

    q_x(x | x*) / q_x(x* | x) = q_u(u | u*) / q_u(u* | u):

the Jacobians cancel, and the Hastings correction computed in whitened coordinates (the
proposal's ``log_correction``: both kernel-covariance densities for KAMH, the kinetic
energy change for kernel HMC) is the correction in the user's coordinates. The target
ratio ``pi(x*) / pi(x)`` is the told log densities' difference, unchanged (the target in
whitened coordinates, ``pi(C(u)) det L``, has the same ratio). During scouting the
proposal is a symmetric Gaussian random walk (no correction). ``m`` and ``L`` change only
during warm-up, at the end of iteration ``w`` and of each learning window, and always
between two transitions: the map is part of the state, the ``ask`` of a transition uses
the state's map for the proposal and for both of its densities, and a new map (with the
history whitened by it) takes effect from the next ``ask``, which uses it for both
again. No transition mixes two maps, so each one's ratio is right. After warm-up the
map is a constant, so the post-warm-up chain is an ordinary Metropolis-Hastings chain
with a fixed proposal (``"warmup"`` adaptation), or a diminishing-adaptation chain whose
preconditioner is fixed (``"diminishing"``). The tests check the ratio identity on random pairs against
the density computed directly in ``x`` coordinates.

``preconditioning: "none"`` skips all of this and runs the papers' original algorithms in
the user's coordinates (for reproducing the papers).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kameleon.core.interface.chain import FloatArray, Proposal, StepInfo, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.interface.metropolis import metropolis_ask, metropolis_transition
from kameleon.core.interface.sampler import OptionError
from kameleon.core.numerics.arithmetic import exp1, log1
from kameleon.core.numerics.matrices import matmul, matvec, solve_lower
from kameleon.core.numerics.rng import Stream, generator
from kameleon.core.tuning.adaptation import Welford, learning_rate, robbins_monro
from kameleon.core.tuning.shrinkage import window_factor
from kameleon.core.tuning.windows import min_window, window_ends, window_start

__all__ = [
    "PRECONDITIONING_COLD_FIELDS",
    "PRECONDITIONING_MODES",
    "PreconditionOptions",
    "Preconditioner",
    "ask",
    "initial_fields",
    "is_scouting",
    "kernel_start",
    "learning_window_ends",
    "rewhiten",
    "scout_ask",
    "scouting_iterations",
    "scouting_log_scale",
    "tell",
]

PRECONDITIONING_MODES = ("diagonal", "dense", "none")
#: Target acceptance of the scouting random walk (Roberts, Gelman and Gilks 1997).
SCOUT_TARGET_ACCEPTANCE = 0.234
#: The state fields of the preconditioning that a store keeps with the cold parts.
PRECONDITIONING_COLD_FIELDS = ("scout_moments", "scout_factor", "scout_running", "preconditioner")
#: A scouting window's running estimate is refreshed every this share of ``min_window``
#: states (:func:`refreshes`).
REFRESH = 0.5
#: The fewest states a learning window after scouting holds (fewer: merged into the next).
MIN_LEARNING_WINDOW = 100


@register("preconditioning.Preconditioner")
@dataclass(frozen=True, slots=True)
class Preconditioner:
    """The affine map between the user's coordinates ``x`` and whitened ones ``u``.

    Attributes
    ----------
    shift
        ``m``, shape ``(d,)``.
    factor
        ``L``, lower triangular with a positive diagonal, shape ``(d, d)``.
    """

    shift: FloatArray
    factor: FloatArray

    def whiten(self, x: FloatArray) -> FloatArray:
        """``u = L^-1 (x - m)``."""
        return frozen_array(solve_lower(self.factor, x - self.shift))

    def color(self, u: FloatArray) -> FloatArray:
        """``x = m + L u``."""
        return frozen_array(self.shift + matvec(self.factor, u))


@dataclass(frozen=True, slots=True, kw_only=True)
class PreconditionOptions:
    """The preconditioning options every kernel sampler's ``Params`` carries.

    Attributes
    ----------
    preconditioning
        ``"dense"`` (default): scout with Adaptive Metropolis for the first
        ``precondition_iterations`` warm-up iterations, then run the kernel method in
        coordinates whitened by the covariance they found, re-estimated from the
        chain's own states in windows through the rest of warm-up and frozen at its
        end (module docstring); this removes linear correlations and differences of
        units whatever the rotation of the target's axes. ``"diagonal"``: scale each
        coordinate by its standard deviation only (blind to a rotation). ``"none"``: the
        papers' original algorithm in the user's coordinates.
    precondition_iterations
        ``w``, the scouting iterations (default: half the warm-up). 0 turns
        preconditioning off.
    initial_scale
        Standard deviation per coordinate of the first scouting proposals' covariance
        ``initial_scale^2 I`` (default 1); the scale adaptation corrects it within a
        few hundred iterations.
    random_walk_probability
        After scouting, the probability that an iteration is a random-walk Metropolis
        step along the scouting covariance instead of the kernel method's (default 0.1;
        0 for the kernel method alone; see :func:`is_random_walk`). Not used with
        ``preconditioning: "none"``.
    """

    preconditioning: Literal["diagonal", "dense", "none"] = "dense"
    precondition_iterations: int | None = None
    initial_scale: float = 1.0
    random_walk_probability: float = 0.1

    def check(self) -> None:
        if not 0 <= self.random_walk_probability < 1:
            raise OptionError("random_walk_probability", "must be in [0, 1)")
        if self.precondition_iterations is not None and self.precondition_iterations < 0:
            raise OptionError("precondition_iterations", "must be non-negative")
        if not self.initial_scale > 0:
            raise OptionError("initial_scale", "must be positive")


def scouting_iterations(params: Any) -> int:
    """``w`` for ``params`` (0: no preconditioning)."""
    if params.preconditioning == "none":
        return 0
    if params.precondition_iterations is not None:
        return int(min(params.precondition_iterations, params.warmup))
    return int(params.warmup) // 2


def initial_fields(dim: int) -> dict[str, Any]:
    """The preconditioning fields of a new chain's state.

    ``scout_log_lambda`` is the scouting scale's log, ``scout_moments`` the running moments
    of the current window, ``scout_factor`` the Cholesky factor of the previous window's
    regularised covariance (``None`` before the first window ends), ``scout_running``
    the current window's running estimate of it (:func:`refreshes`; ``None`` until the
    window holds enough states), and ``preconditioner`` the fixed map (``None`` until
    scouting ends, and for ever without preconditioning).
    """
    return {
        "scout_log_lambda": 0.0,
        "scout_moments": Welford.empty(dim),
        "scout_factor": None,
        "scout_running": None,
        "preconditioner": None,
    }


def is_scouting(state: Any, params: Any) -> bool:
    """Whether the next transition of ``state`` is a scouting one."""
    return bool(state.iteration < scouting_iterations(params))


def _prior(state: Any, params: Any, dim: int) -> FloatArray:
    """The covariance basis a new estimate is shrunk toward: the last window's, or at
    first ``initial_scale^2 I``."""
    previous: FloatArray | None = state.scout_factor
    if previous is not None:
        return previous
    return float(params.initial_scale) * np.eye(dim)


def refreshes(count: int, dim: int) -> bool:
    """Whether a scouting window's running estimate is re-estimated once it holds
    ``count`` states: at :func:`core.tuning.windows.min_window` states and every half of
    that after (every ``max(10, d)`` states).

    Adaptive Metropolis re-estimates its covariance at every step (Haario et al. 2001);
    the shrinkage rule here may need an eigendecomposition
    (:func:`core.tuning.shrinkage.shrunk_factor`), some milliseconds in tens of
    dimensions, so the estimate is kept in the state and refreshed on this schedule,
    which the proposals see as a step function of the window's growth.
    """
    first = min_window(dim)
    return count >= first and (count - first) % max(1, int(first * REFRESH)) == 0


def _scout_factor(state: Any, params: Any, dim: int) -> FloatArray:
    """Cholesky factor of the scouting proposal's covariance basis ``Sigma``: the current
    window's running estimate, or before it has one the previous window's, or at first
    ``initial_scale I``."""
    running: FloatArray | None = state.scout_running
    if running is not None:
        return running
    previous: FloatArray | None = state.scout_factor
    if previous is not None:
        return previous
    return float(params.initial_scale) * np.eye(dim)


def kernel_start(params: Any) -> int:
    """The iteration after which the kernel method collects its history and adapts."""
    return max(int(getattr(params, "adapt_start", 0)), scouting_iterations(params))


def scout_ask(state: Any, params: Any) -> Proposal:
    """A scouting proposal: ``x* = x + sqrt(lambda s_d) L_Sigma z``, ``z ~ N(0, I)``."""
    return metropolis_ask(state, params, _scout_propose)


def _scout_propose(state: Any, params: Any, rng: np.random.Generator) -> tuple[FloatArray, float]:
    dim = state.position.size
    scale = exp1(0.5 * state.scout_log_lambda) * 2.38 / math.sqrt(dim)
    return state.position + scale * matvec(
        _scout_factor(state, params, dim), rng.standard_normal(dim)
    ), 0.0


def scout_adapt(state: Any, params: Any, info: StepInfo) -> Any:
    """Adapt the scouting fields after transition ``info.iteration`` (every scouting
    iteration adapts); at the end of a window (:func:`window_ends`) start the next one
    from its covariance, at the end of the last one fix the preconditioner.

    The windows double in length, as in Stan's warm-up: a coordinate whose scale the
    first proposals got far too small diffuses over a window to a spread several times
    its step, which becomes the next window's step, so its scale grows geometrically
    from window to window instead of by diffusion alone. Each window restarts the scale
    ``lambda`` at 1, the right value for a covariance that matches the target's.
    """
    t = info.iteration
    w = scouting_iterations(params)
    dim = state.position.size
    dense = params.preconditioning == "dense"
    prior = _prior(state, params, dim)
    log_lambda = robbins_monro(
        state.scout_log_lambda,
        info.acceptance_probability,
        SCOUT_TARGET_ACCEPTANCE,
        learning_rate(t, start=window_start(t, w, dim)),
    )
    moments = state.scout_moments.update(state.position)
    scout_factor = state.scout_factor
    running = state.scout_running
    preconditioner = None
    if t != w and t in window_ends(w, dim):
        factor = window_factor(moments, dense, prior) if moments.count >= 2 else None
        if factor is not None:
            scout_factor = frozen_array(factor)
            log_lambda = 0.0
        moments = Welford.empty(dim)
        running = None
    elif t != w and refreshes(moments.count, dim):
        factor = window_factor(moments, dense, prior)
        running = None if factor is None else frozen_array(factor)
    if t == w:
        factor = window_factor(moments, dense, prior)
        # The mixture's random walk (see ask) steps along the window's full covariance.
        walk = factor if dense else window_factor(moments, True, prior)
        if factor is None:  # the window never moved in some coordinate: keep the last basis
            factor = _scout_factor(state, params, dim)
        preconditioner = Preconditioner(frozen_array(moments.mean), frozen_array(factor))
        scout_factor = frozen_array(walk) if walk is not None else preconditioner.factor
        # The first learning window (see learn) starts here.
        moments = Welford.empty(dim)
        running = None
    return dataclasses.replace(
        state,
        scout_log_lambda=log_lambda,
        scout_moments=moments,
        scout_factor=scout_factor,
        scout_running=running,
        preconditioner=preconditioner,
    )


@functools.lru_cache(maxsize=256)
def _learning_window_ends(w: int, warmup: int, dim: int) -> tuple[int, ...]:
    k = warmup - w
    shortest = max(MIN_LEARNING_WINDOW, 2 * dim)
    ends: list[int] = []
    for eighths in (1, 2, 4, 6):
        end = w + k * eighths // 8
        if end - (ends[-1] if ends else w) >= shortest and warmup - end >= shortest:
            ends.append(end)
    return tuple(ends)


def learning_window_ends(params: Any, dim: int) -> tuple[int, ...]:
    """The iterations after scouting at whose end the map ``(m, L)`` is re-estimated.

    With ``K`` the warm-up iterations after scouting, the windows end at ``w + K/8,
    w + K/4, w + K/2, w + 3K/4``, leaving out any end that would make a window, or the
    rest of warm-up, shorter than ``max(100, 2 d)`` states. The windows grow, as
    scouting's do, so each estimate comes from a chain whiter than the last one's; the
    last quarter of warm-up lets the kernel method adapt its scales to the final map. Empty without preconditioning, or when warm-up ends with scouting.
    """
    w = scouting_iterations(params)
    if w == 0 or params.warmup <= w:
        return ()
    return _learning_window_ends(w, int(params.warmup), dim)


def rewhiten(rows: FloatArray, old: Preconditioner, new: Preconditioner) -> FloatArray:
    """Rows whitened by ``old`` whitened by ``new`` instead: ``W_new(C_old(u))``.

    ``L_new^-1 (L_old u + m_old - m_new) = A u + c`` with ``A = L_new^-1 L_old`` (column by
    column) and ``c = L_new^-1 (m_old - m_new)``; the same points in the user's
    coordinates, seen through the new map.
    """
    if rows.shape[0] == 0:
        return rows
    dim = rows.shape[1]
    columns = [solve_lower(new.factor, np.ascontiguousarray(old.factor[:, j])) for j in range(dim)]
    a_transposed = np.array(columns)  # row j is column j of A
    shift = solve_lower(new.factor, old.shift - new.shift)
    return frozen_array(matmul(rows, a_transposed) + shift)


Remap = Callable[[Any, Any, Preconditioner], Any]
"""A sampler's ``remap(state, params, old)``: the map changed from ``old`` to
``state.preconditioner``; re-express the kernel method's whitened fields (history,
surrogate, bandwidth) in the new whitened coordinates."""


def learn(state: Any, params: Any, remap: Remap) -> Any:
    """After a transition past scouting in warm-up: enter the state (user's coordinates)
    into the current learning window's moments, and at the end of a window
    (:func:`learning_window_ends`) re-estimate the map from them and let ``remap``
    carry the kernel method's history over. After warm-up nothing changes, so the
    map is frozen and the post-warm-up chain an exact Metropolis-Hastings chain.

    The new map takes effect from the next ``ask``: the transition just made used the
    old one in both of its proposal densities, the next uses the new one in both.
    """
    t = state.iteration
    if t > params.warmup or state.preconditioner is None:
        return state
    dim = state.position.size
    ends = learning_window_ends(params, dim)
    if not ends or t > ends[-1]:
        return state
    moments = state.scout_moments.update(state.position)
    if t not in ends:
        return dataclasses.replace(state, scout_moments=moments)
    empty = Welford.empty(dim)
    prior = _prior(state, params, dim)
    dense = params.preconditioning == "dense"
    factor = window_factor(moments, dense, prior, learning=True)
    if factor is None:  # the window never moved in some coordinate: keep the map
        return dataclasses.replace(state, scout_moments=empty)
    old = state.preconditioner
    walk = factor if dense else window_factor(moments, True, prior, learning=True)
    state = dataclasses.replace(
        state,
        scout_moments=empty,
        preconditioner=Preconditioner(frozen_array(moments.mean), frozen_array(factor)),
        scout_factor=frozen_array(walk) if walk is not None else state.scout_factor,
    )
    return remap(state, params, old)


def is_random_walk(state: Any, params: Any) -> bool:
    """Whether the next transition of a chain past scouting is the mixture's random walk.

    After scouting, each iteration is, with probability ``random_walk_probability``, a
    random-walk Metropolis step ``x* = x + sqrt(lambda s_d) L_W z`` along the last scouting
    window's covariance ``L_W L_W^T`` (Adaptive Metropolis with its covariance frozen), and
    otherwise the kernel method's. The choice is a coin from its own stream, independent
    of the state, so the mixture of the two kernels, each of which leaves the target
    invariant, does too. The random walk keeps exploring where the kernel method's fit,
    learnt from the warm-up history, has not been: the kernel HMC surrogate's gradient
    pulls trajectories back into the region it was fitted on. The last warm-up iteration
    is always the kernel method's, which brings its fit up to date there.
    """
    p = params.random_walk_probability
    if p <= 0 or state.preconditioner is None or state.logdensity is None:
        return False
    t = state.iteration + 1
    if t == params.warmup:
        return False
    return bool(generator(state.seed, state.chain, t, Stream.MIX).random() < p)


def _walk_propose(state: Any, params: Any, rng: np.random.Generator) -> tuple[FloatArray, float]:
    """The mixture's random walk (see :func:`is_random_walk`)."""
    dim = state.position.size
    scale = exp1(0.5 * state.scout_log_lambda) * 2.38 / math.sqrt(dim)
    return state.position + scale * matvec(state.scout_factor, rng.standard_normal(dim)), 0.0


def whitened(state: Any) -> Any:
    """``state`` with its position in whitened coordinates (for the kernel method)."""
    return dataclasses.replace(state, position=state.preconditioner.whiten(state.position))


def ask(state: Any, params: Any, kernel_ask: Callable[[Any, Any], Proposal]) -> Proposal:
    """``ask`` of a preconditioned kernel sampler whose kernel method is ``kernel_ask``.

    An initial point is handed out exactly as given; a scouting proposal is Adaptive
    Metropolis'; after scouting, the kernel method proposes from the whitened state and
    its proposal is mapped back, with its ``log_correction`` unchanged (module docstring).
    """
    if state.logdensity is not None and is_scouting(state, params):
        return scout_ask(state, params)
    if state.logdensity is None or state.preconditioner is None:
        return kernel_ask(state, params)
    if is_random_walk(state, params):
        return metropolis_ask(state, params, _walk_propose)
    proposal = kernel_ask(whitened(state), params)
    return dataclasses.replace(proposal, position=state.preconditioner.color(proposal.position))


def tell(
    state: Any,
    params: Any,
    proposal: Proposal,
    logdensity: float,
    kernel_tell: Callable[[Any, Any, Proposal, float], tuple[Any, StepInfo]],
    handover: Callable[[Any, Any], Any],
    remap: Remap,
) -> tuple[Any, StepInfo]:
    """``tell`` of a preconditioned kernel sampler (see :func:`ask`).

    ``handover(state, params)`` sets the kernel method's own fields when scouting ends
    (its scales from the scouting scale, see :func:`scouting_log_scale`). After scouting,
    the new state's position is the proposal exactly as handed out (or the old position):
    whitening is for the kernel method's arithmetic only. Through the rest of warm-up
    every transition's state enters the map's re-estimation (:func:`learn`), and
    ``remap(state, params, old)`` carries the kernel method over to a new map.
    """
    if proposal.kind == "proposal" and is_scouting(state, params):
        new, info, _ = metropolis_transition(state, proposal, logdensity, warmup=params.warmup)
        new = scout_adapt(new, params, info)
        if new.preconditioner is not None:
            new = handover(new, params)
        return new, info
    if proposal.kind == "init" or state.preconditioner is None:
        return kernel_tell(state, params, proposal, logdensity)
    if is_random_walk(state, params):
        new, info, _ = metropolis_transition(state, proposal, logdensity, warmup=params.warmup)
        if info.iteration <= params.warmup:  # its scale adapts in warm-up, then freezes
            log_lambda = robbins_monro(
                state.scout_log_lambda,
                info.acceptance_probability,
                SCOUT_TARGET_ACCEPTANCE,
                learning_rate(info.iteration),
            )
            new = dataclasses.replace(new, scout_log_lambda=log_lambda)
        return learn(new, params, remap), info
    pre = state.preconditioner
    new, info = kernel_tell(
        whitened(state),
        params,
        dataclasses.replace(proposal, position=pre.whiten(proposal.position)),
        logdensity,
    )
    position = proposal.position if info.outcome == "accepted" else state.position
    return learn(dataclasses.replace(new, position=position), params, remap), info


def scouting_log_scale(state: Any) -> float:
    """``log sqrt(lambda s_d)``: the scouting random walk's final step per whitened
    coordinate, where a kernel method's own step sizes start."""
    dim = state.position.size
    return 0.5 * float(state.scout_log_lambda) + log1(2.38 / math.sqrt(dim))
