"""The check of a told gradient against finite differences of told log densities.

A wrong gradient is the commonest bug in a likelihood code that supplies one, and a
gradient sampler fed one samples the wrong distribution without a sign. So the first
chains of a session (``gradient_check`` of them, 1 by default) check it once, at the
chain's initial point ``x`` with its told log density ``f(x)`` and gradient ``g``: for
each coordinate ``i`` the chain hands out ``x + h e_i`` and ``x - h e_i`` (proposals of
kind ``"gradient_check"``, steps of the first transition) and compares the central
difference ``(f(x + h e_i) - f(x - h e_i)) / 2h`` with ``g_i``.

It must never refuse a right gradient, whatever the target's units, so it is
conservative. ``h`` starts at ``1e-3 max(|x_i|, 1e-3)`` and shrinks tenfold up to three
times while the two disagree. A coordinate passes when they agree within
``1e-3 max(|g_i|, |d|) + 10 eps max|f| / h`` (the truncation and the rounding of a
central difference); a gradient is declared wrong only when the last two differences
agree with each other (they have converged, so the log density is smooth there and the
differences are right) and both disagree with ``g_i`` by more than 10 %. Differences that
do not converge (a log density that is noisy, as an estimate, or not smooth at ``x``)
leave the coordinate unchecked rather than raise.

A sampler that checks keeps a :class:`Check` in its state (field ``check``) with its
current gradient (``gradient``) and evaluations told in the current transition
(``step``); its ``ask`` and ``tell`` start with :func:`check_ask` and :func:`check_tell`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from kameleon.core.interface.chain import Proposal, StepInfo, frozen_array
from kameleon.core.interface.codec import register

__all__ = ["Check", "GradientMismatch", "check_ask", "check_tell", "start_check"]

#: Tenfold shrinkings of ``h`` tried after the first.
LEVELS = 4
#: Relative agreement that passes a coordinate.
RTOL = 1e-3
#: Relative disagreement of converged differences that declares a gradient wrong.
WRONG = 0.1
_EPS = sys.float_info.epsilon
#: ``10^-level`` as literals (a power is the C library's, which may differ by CPU).
_SHRINK = (1.0, 1e-1, 1e-2, 1e-3)


class GradientMismatch(ValueError):
    """A told gradient disagrees with finite differences of told log densities."""


@register("gradient_check.Check")
@dataclass(frozen=True, slots=True)
class Check:
    """Where a chain's gradient check is.

    Attributes
    ----------
    pending
        Whether the check has points left to hand out (false: done, or never needed).
    coordinate, level
        The coordinate checked and the shrinking of ``h`` reached.
    plus
        ``f(x + h e_i)`` once told (``nan`` before).
    previous
        The central difference of the level before (``nan`` at the first).
    unchecked
        Coordinates whose differences did not converge.
    """

    pending: bool
    coordinate: int = 0
    level: int = 0
    plus: float = math.nan
    previous: float = math.nan
    unchecked: int = 0


def start_check(chain: int, chains_checked: int) -> Check:
    """A new chain's check: pending in the first ``chains_checked`` chains."""
    return Check(pending=chain < chains_checked)


def _h(x: float, level: int) -> float:
    return 1e-3 * max(abs(x), 1e-3) * _SHRINK[level]


def _point(state: Any, check: Check, sign: float) -> Any:
    x = np.array(state.position, dtype=np.float64)
    i = check.coordinate
    x[i] = x[i] + sign * _h(float(state.position[i]), check.level)
    return x


def check_ask(state: Any) -> Proposal | None:
    """The next point of the chain's check, or ``None`` when it has none to hand out
    (done, never needed, or the initial point not told yet)."""
    check: Check = state.check
    if not check.pending or state.logdensity is None:
        return None
    plus_told = not math.isnan(check.plus)
    position = frozen_array(_point(state, check, -1.0 if plus_told else 1.0))
    return Proposal(state.iteration + 1, "gradient_check", position, 0.0, state.step)


def check_tell(
    state: Any, proposal: Proposal, logdensity: float, gradient: Any
) -> tuple[Any, StepInfo]:
    """A told point of the check: the state one step on (``step`` counted, the check
    moved on); raises :class:`GradientMismatch` when the gradient is wrong."""
    check: Check = state.check
    expected = check_ask(state)
    if (
        expected is None
        or proposal.kind != "gradient_check"
        or (proposal.iteration, proposal.step) != (expected.iteration, expected.step)
    ):
        raise ValueError("proposal does not belong to this state")
    if math.isnan(logdensity) or logdensity == math.inf:
        raise ValueError("log density must be a number or -inf")
    info = StepInfo(proposal.iteration, "step", 1.0, proposal.iteration <= 0)
    new_step = state.step + 1
    if math.isnan(check.plus):
        return state.evolve(check=_replace(check, plus=float(logdensity)), step=new_step), info
    i = check.coordinate
    h = _h(float(state.position[i]), check.level)
    plus, minus, f0 = check.plus, float(logdensity), float(state.logdensity)
    g = float(state.gradient[i])
    if not (math.isfinite(plus) and math.isfinite(minus)):
        # A point outside the support: the difference says nothing; try closer in.
        diff = math.nan
    else:
        diff = (plus - minus) / (2.0 * h)
    if math.isfinite(diff):
        rounding = 10.0 * _EPS * max(abs(plus), abs(minus), abs(f0)) / h
        if abs(diff - g) <= RTOL * max(abs(g), abs(diff)) + rounding:
            return state.evolve(check=_next(check, state.position.size), step=new_step), info
        prev = check.previous
        converged = math.isfinite(prev) and abs(diff - prev) <= 1e-2 * max(abs(diff), abs(prev))
        if converged and abs(diff - g) > WRONG * max(abs(g), abs(diff)):
            raise GradientMismatch(
                f"the told gradient is wrong in coordinate {i}: it is {g!r} there, but "
                f"finite differences of the told log densities give {diff!r} "
                f"(central difference with h = {h:.3g} at the initial point of chain "
                f"{state.chain})"
            )
    if check.level + 1 < LEVELS:
        shrunk = Check(True, i, check.level + 1, math.nan, diff, check.unchecked)
        return state.evolve(check=shrunk, step=new_step), info
    unchecked = _replace(check, unchecked=check.unchecked + 1)
    return state.evolve(check=_next(unchecked, state.position.size), step=new_step), info


def _next(check: Check, dim: int) -> Check:
    """The check moved to the next coordinate (done after the last)."""
    i = check.coordinate + 1
    return Check(i < dim, i if i < dim else 0, 0, math.nan, math.nan, check.unchecked)


def _replace(check: Check, **changes: Any) -> Check:
    return dataclasses.replace(check, **changes)
