"""The warm-up of the gradient samplers (MALA, HMC, NUTS), as Stan lays it out.

Step size
    Dual averaging (Nesterov 2009; Hoffman and Gelman 2014, section 3.2) toward a target
    acceptance statistic: during warm-up the step is ``exp(mu - sqrt(m) / gamma *
    h_bar)``, and after it the iterate average ``exp(log_step_bar)``. The constants are
    Stan's (``gamma = 0.05``, ``t0 = 10``, ``kappa = 0.75``, ``mu = log(10 eps0)``).
Metric
    The inverse metric (the mass matrix's inverse: the proposal's covariance shape) is
    estimated in windows, Stan's "slow" windows: a first buffer of 75 iterations where
    only the step size adapts, windows of 25, 50, 100, ... iterations (the last
    stretched to the end of the slow phase), then a last buffer of 50 where the step
    size settles on the final metric. At each window's end the metric is estimated from
    the window's states (:class:`MetricWindow`) and the step size's dual averaging
    starts again. For short warm-ups the buffers shrink to 15 % and 10 % of it, as in
    Stan.

Unlike Stan's, the diagonal metric is estimated from the positions *and the gradients*
of the window, ``m_i = sqrt(var(x_i) / var(g_i))`` (as nutpie does; Seyboldt 2023): for a
Gaussian with independent coordinates it is the variance ``s_i^2`` exactly, however
little of the target the window has explored, where the positions' variance alone grows
by a few times per window, and a chain started at a scale wrong by orders of magnitude
leaves warm-up still wrong. (With correlations it is ``sqrt(Sigma_ii / P_ii)``, between
the marginal and the conditional variance.) A dense metric is the positions' covariance,
as Stan's, shrunk toward that diagonal while the window is short: only the covariance
straightens a correlated target (scaling the correlations by the diagonal above left a
condition number near 1000 on a rotated 10-d Gaussian, BENCHMARKS.md section 5). Nothing
is shrunk toward ``1e-3 I``, which would swamp a posterior whose scales are ``1e-4``: a
target in any units gets the same metric.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.interface.chain import FloatArray, frozen_array
from kameleon.core.interface.codec import register
from kameleon.core.numerics.arithmetic import exp1, log1, pow1
from kameleon.core.numerics.matrices import cholesky, dot, matvec
from kameleon.core.tuning.adaptation import MAX_VARIANCE

__all__ = [
    "DualAveraging",
    "MetricWindow",
    "initial_step_size",
    "metric_window_ends",
    "metric_window_start",
    "warmup_changes",
]

#: Stan's dual-averaging constants.
GAMMA, T0, KAPPA = 0.05, 10.0, 0.75


@register("gradient_warmup.DualAveraging")
@dataclass(frozen=True, slots=True)
class DualAveraging:
    """Dual averaging of ``log(step size)`` toward a target acceptance statistic.

    Attributes
    ----------
    log_step
        The step size to use during warm-up, as its log.
    log_step_bar
        The iterate average: the step size once warm-up ends.
    h_bar
        The running mean of ``target - acceptance``.
    count
        Updates since the last :meth:`start`.
    mu
        The point the iterates shrink toward, ``log(10 eps0)``.
    """

    log_step: float
    log_step_bar: float
    h_bar: float
    count: int
    mu: float

    @staticmethod
    def start(step_size: float) -> DualAveraging:
        log_step = log1(step_size)
        return DualAveraging(log_step, 0.0, 0.0, 0, log1(10.0) + log_step)

    def update(self, acceptance: float, target: float) -> DualAveraging:
        """One update with a transition's acceptance statistic (clipped to [0, 1]; a
        non-number counts as 0, a divergence)."""
        a = 0.0 if not math.isfinite(acceptance) else min(1.0, max(0.0, acceptance))
        m = self.count + 1
        w = 1.0 / (m + T0)
        h_bar = (1.0 - w) * self.h_bar + w * (target - a)
        log_step = self.mu - math.sqrt(m) / GAMMA * h_bar
        log_step = min(50.0, max(-50.0, log_step))
        eta = pow1(m, -KAPPA)
        log_step_bar = eta * log_step + (1.0 - eta) * self.log_step_bar
        return DualAveraging(log_step, log_step_bar, h_bar, m, self.mu)

    def final(self) -> float:
        """The step size after warm-up: the iterate average (the current step when
        nothing was averaged yet)."""
        return exp1(self.log_step_bar if self.count else self.log_step)


def initial_step_size(gradient: FloatArray, metric: FloatArray) -> float:
    """A first step size in the target's units, from the gradient at the initial point:
    ``1 / |M^(1/2) g|`` (for a standard Gaussian at distance ``r`` from its mode this is
    ``1 / r``), 1 where the gradient vanishes or is not finite. Dual averaging corrects
    it within tens of iterations; this only saves those when the scale is far from 1."""
    g = np.asarray(gradient, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        square = dot(g, matvec(metric, g)) if metric.ndim == 2 else float(np.sum(metric * g * g))
    scaled = math.sqrt(square) if square >= 0.0 else math.nan  # NaN: not finite
    if not math.isfinite(scaled) or scaled <= 0.0:
        return 1.0
    return min(1e3, max(1e-8, 1.0 / scaled)) if scaled < 1e300 else 1e-8


def _buffers(warmup: int) -> tuple[int, int, int]:
    init_buffer, term_buffer, base = 75, 50, 25
    if init_buffer + term_buffer + base > warmup:
        init_buffer = int(0.15 * warmup)
        term_buffer = int(0.1 * warmup)
        base = warmup - init_buffer - term_buffer
    return init_buffer, term_buffer, base


def metric_window_start(warmup: int) -> int:
    """The iteration after which the first metric window collects positions."""
    return _buffers(warmup)[0]


@functools.lru_cache(maxsize=256)
def metric_window_ends(warmup: int) -> tuple[int, ...]:
    """The warm-up iterations at whose end the metric is re-estimated (Stan's slow
    windows): empty when the warm-up is too short to estimate anything (under 20)."""
    if warmup < 20:
        return ()
    init_buffer, term_buffer, base = _buffers(warmup)
    last = warmup - term_buffer
    ends: list[int] = []
    start, size = init_buffer, base
    while True:
        end = start + size
        # The next window would not fit twice its size before the last buffer: this
        # one stretches to the end of the slow phase.
        if end + 2 * size > last:
            ends.append(last)
            break
        ends.append(end)
        start, size = end, 2 * size
    return tuple(ends)


@register("gradient_warmup.MetricWindow")
@dataclass(frozen=True, slots=True)
class MetricWindow:
    """Running moments of one metric window's states: the means and sums of squared
    deviations of the positions and of the gradients (Welford), and for a dense metric
    the positions' sum of outer products of deviations (``outer``, else shape
    ``(0, 0)``)."""

    count: int
    mean_x: FloatArray
    m2_x: FloatArray
    mean_g: FloatArray
    m2_g: FloatArray
    outer: FloatArray

    @staticmethod
    def empty(dim: int, dense: bool) -> MetricWindow:
        zeros = frozen_array(np.zeros(dim))
        outer = np.zeros((dim, dim) if dense else (0, 0))
        return MetricWindow(0, zeros, zeros, zeros, zeros, frozen_array(outer))

    def update(self, x: FloatArray, g: FloatArray) -> MetricWindow:
        n = self.count + 1
        with np.errstate(over="ignore", invalid="ignore"):
            dx = x - self.mean_x
            mean_x = self.mean_x + dx / n
            dg = g - self.mean_g
            mean_g = self.mean_g + dg / n
            m2_x = self.m2_x + dx * (x - mean_x)
            m2_g = self.m2_g + dg * (g - mean_g)
            outer = self.outer + np.outer(dx, x - mean_x) if self.outer.size else self.outer
        return MetricWindow(
            n,
            frozen_array(mean_x),
            frozen_array(m2_x),
            frozen_array(mean_g),
            frozen_array(m2_g),
            frozen_array(outer),
        )

    def metric(self) -> FloatArray | None:
        """The inverse metric the window gives: ``sqrt(var(x) / var(g))`` per coordinate
        (the positions' variance where the gradients do not vary); for a dense one the
        positions' covariance, shrunk toward that diagonal by ``5 / (n + 5)``; ``None``
        when it gives none (fewer than 3 states, a variance that is 0 or not finite, or
        beyond :data:`core.tuning.adaptation.MAX_VARIANCE`)."""
        n = self.count
        if n < 3:
            return None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            var_x = self.m2_x / (n - 1)
            var_g = self.m2_g / (n - 1)
            diag = np.where(var_g > 0.0, np.sqrt(var_x / var_g), var_x)
        if not (np.all(np.isfinite(diag)) and np.all(diag > 0.0)) or np.any(diag > MAX_VARIANCE):
            return None
        if not self.outer.size:
            return frozen_array(diag)
        cov = self.outer / (n - 1)
        if not (np.all(np.isfinite(cov)) and np.all(np.diagonal(cov) > 0.0)):
            return frozen_array(np.diag(diag))
        w = n / (n + 5.0)  # shrunk toward the diagonal while the window is short
        dense = w * cov + (1.0 - w) * np.diag(diag)
        try:
            cholesky(dense)
        except np.linalg.LinAlgError:
            return frozen_array(np.diag(diag))
        return frozen_array(dense)


def warmup_changes(new: Any, params: Any, acceptance: float, t: int) -> dict[str, Any]:
    """The warm-up's changes to a gradient sampler's state ``new`` after transition
    ``t`` with acceptance statistic ``acceptance`` (nothing after warm-up).

    The state has ``position``, ``gradient``, ``adapt`` (:class:`DualAveraging`),
    ``step_size``, ``metric`` (the inverse metric, a vector or a matrix) and ``window``
    (the current window's :class:`MetricWindow`); the params ``warmup``, ``target_acceptance``,
    ``adapt_step_size``, ``adapt_metric`` and ``metric`` (``"diag"``, ``"dense"`` or
    ``"unit"``).
    """
    if t > params.warmup:
        return {}
    adapt = new.adapt
    step_size = new.step_size
    if params.adapt_step_size:
        adapt = adapt.update(acceptance, params.target_acceptance)
        step_size = exp1(adapt.log_step)
    changes: dict[str, Any] = {}
    ends = metric_window_ends(params.warmup)
    if params.adapt_metric and params.metric != "unit" and ends:
        window = new.window
        if metric_window_start(params.warmup) < t <= ends[-1]:
            window = window.update(new.position, new.gradient)
        if t in ends:
            metric = window.metric()
            if metric is not None:
                changes["metric"] = metric
            window = MetricWindow.empty(new.position.size, params.metric == "dense")
            if params.adapt_step_size:
                adapt = DualAveraging.start(step_size)
        changes["window"] = window
    if params.adapt_step_size and t == params.warmup:
        step_size = adapt.final()
    changes["adapt"] = adapt
    changes["step_size"] = step_size
    return changes
