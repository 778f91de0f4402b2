"""The stopping rule: stop sampling once every parameter has converged by given bounds
(the service checks it every ``check_every`` post-warm-up iterations per chain,
:func:`core.running.inprocess.sample` likewise)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kameleon.core.diagnostics.summary import ParameterSummary

__all__ = ["StopRule"]


@dataclass(frozen=True, slots=True)
class StopRule:
    """Stop sampling when every parameter has converged by these bounds.

    Attributes
    ----------
    rhat
        Every parameter's rank-normalised split R-hat must be below it.
    ess
        Every parameter's bulk and tail ESS, over all chains, must be above it.
    check_every
        Post-warm-up iterations per chain between two checks of the rule.
    """

    rhat: float = 1.01
    ess: float = 400.0
    check_every: int = 1000

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rhat) and self.rhat > 1.0):
            raise ValueError(f"stop rule: rhat must be a finite number above 1, not {self.rhat}")
        if not (math.isfinite(self.ess) and self.ess > 0):
            raise ValueError(f"stop rule: ess must be a positive finite number, not {self.ess}")
        if isinstance(self.check_every, bool) or not isinstance(self.check_every, int):
            raise ValueError("stop rule: check_every must be an integer")
        if self.check_every < 1:
            raise ValueError(f"stop rule: check_every must be positive, not {self.check_every}")

    @classmethod
    def of(cls, rule: StopRule | Mapping[str, Any]) -> StopRule:
        """``rule`` itself, or the rule a mapping such as ``{"rhat": 1.01}`` describes."""
        if isinstance(rule, StopRule):
            return rule
        unknown = set(rule) - {"rhat", "ess", "check_every"}
        if unknown:
            raise ValueError(f"stop rule: unknown fields {sorted(unknown)}")
        return cls(**rule)

    def met(self, summaries: Sequence[ParameterSummary]) -> bool:
        """Whether every parameter meets the rule; an undefined statistic does not."""
        return bool(summaries) and all(
            p["r_hat"] < self.rhat and p["ess_bulk"] > self.ess and p["ess_tail"] > self.ess
            for p in summaries
        )
