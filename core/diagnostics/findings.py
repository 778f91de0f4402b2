"""The warnings a user should read about a run, what each says, and how they are grouped.

:func:`~core.diagnostics.convergence.check` looks at the post-warm-up draws of every chain and each chain's
acceptance rate after warm-up, and returns a list of :class:`Finding`, one per thing
that is wrong, each with a stable ``code``, the parameter or chain it concerns, the
number measured and the threshold it crossed. The service returns them as JSON
(``warnings``); :func:`core.running.inprocess.sample` emits them as :class:`SamplingWarning`.

Codes (stable; the thresholds are constants of :mod:`core.diagnostics.convergence`):

``too_few_draws``
    Fewer than :data:`~core.diagnostics.summary.MIN_DRAWS` post-warm-up draws per chain: R-hat
    and ESS are undefined, nothing else is judged. ``value``: draws per chain.
``nonfinite``
    A parameter has draws that are NaN or infinite. ``value``: how many.
``improper``
    The chains drift without settling, as they do on a target that is not normalisable
    (a flat or unbounded log density, e.g. a parameter without a prior): the chains do
    not agree (some R-hat above :data:`~core.diagnostics.convergence.RHAT_MAX`) and either a parameter whose R-hat
    warns reaches :data:`~core.diagnostics.convergence.DRIFT_MAGNITUDE` in magnitude, or every chain's post-warm-up
    log density (when known) keeps rising (its second half never comes back down to the
    highest value of its first) or never changes while the chain accepts more than
    :data:`~core.diagnostics.convergence.ACCEPTANCE_MAX` of its proposals (a uniform target on a bounded support
    rejects those that leave it). One finding
    for the run; ``value``: the largest magnitude a draw reached, ``parameter``: whose.
    It says all that ``rhat``, ``ess_bulk``, ``ess_tail``, ``acceptance_low``,
    ``acceptance_high``, ``stuck`` and ``chain_mean`` would, which are then not
    reported. A proper target whose warm-up was far too short for it to be found can
    also rise throughout; the message says so.
``rhat``
    Rank-normalised split R-hat above :data:`~core.diagnostics.convergence.RHAT_MAX` (1.01): the chains do not agree
    yet. ``value`` is ``inf`` for chains stuck at different points.
``ess_bulk``, ``ess_tail``
    Bulk or tail ESS below :data:`~core.diagnostics.convergence.ESS_PER_CHAIN_MIN` (100) per chain: too few
    effective draws to trust R-hat, the mean (bulk) or the 5% and 95% quantiles (tail).
    ``threshold`` is 100 times the number of chains.
``acceptance_low``, ``acceptance_high``
    A chain accepted fewer than :data:`~core.diagnostics.convergence.ACCEPTANCE_MIN` (5%) or more than
    :data:`~core.diagnostics.convergence.ACCEPTANCE_MAX` (95%) of its proposals after warm-up: steps too large (the
    chain hardly moves) or too small (it moves by tiny steps).
``stuck``
    A chain's longest run of identical consecutive draws is longer than
    :func:`~core.diagnostics.convergence.stuck_threshold` of the number of draws. ``value``: the run's length.
``chain_mean``
    A chain's mean, on the rank-normalised scale, lies more than :data:`~core.diagnostics.convergence.CHAIN_Z_MAX`
    (5) Monte Carlo standard errors from the other chains' (see
    :func:`core.diagnostics.summary.chain_mean_z`); one finding per chain, for its worst
    parameter, among the parameters whose bulk ESS does not warn (with fewer
    effective draws a chain's own MCSE is too rough to compare chains by, and
    ``ess_bulk`` has spoken already). ``value``: that signed distance.
``divergent``, ``low_ebfmi``
    A Hamiltonian sampler's divergent transitions after warm-up, and a chain's E-BFMI
    below 0.3 (:mod:`core.diagnostics.trajectory_checks`).

Why these two chain checks besides R-hat and acceptance:

- ``stuck`` catches a chain that accepts often enough on average but sat still for a
  long stretch, the mark of a pseudo-marginal chain that met a lucky over-estimate, or
  of a chain caught in a narrow region. A run of ``L`` rejections has probability
  ``(1 - a)^L`` for a chain accepting a fraction ``a`` of its proposals; at the lowest
  rate that does not warn already (``a`` = 5%), :func:`~core.diagnostics.convergence.stuck_threshold` is the run
  length that such a chain of ``n`` draws exceeds with probability below 1%. It grows
  with ``log n`` only: 225 draws for ``n`` = 1 000, 315 for ``n`` = 100 000.
- ``chain_mean`` names the chain that disagrees, which R-hat does not; and one stray
  chain among many moves R-hat by only about ``delta**2 / (2 chains)``, so 16 long
  chains with one of them 0.5 sd off give R-hat below 1.01. Five Monte Carlo standard
  errors: a chain of a converged run goes that far with probability below 1e-6 if its
  MCSE were exact; with estimated MCSEs, 200 runs each of simulated AR(1) chains with
  at least 100 effective draws per chain (4 to 64 chains) never went past 4.4.

:class:`StopRule` (:mod:`core.diagnostics.stopping`, exported here too) is the stopping rule: every
parameter's R-hat below a bound and its bulk and tail ESS (over all chains) above another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kameleon.core.diagnostics.stopping import StopRule

__all__ = ["CODES", "HINTS", "Finding", "SamplingWarning", "StopRule", "group", "grouped_lines"]


CODES = (
    "too_few_draws",
    "nonfinite",
    "improper",
    "rhat",
    "ess_bulk",
    "ess_tail",
    "acceptance_low",
    "acceptance_high",
    "stuck",
    "chain_mean",
    "divergent",
    "low_ebfmi",
    "short_run",
    "pareto_k",
    "importance_ess",
    "unseen_modes",
    "swap_rate_low",
    "evidence_unreliable",
    "smc_unfinished",
)
"""Every finding's code, in the order :func:`~core.diagnostics.convergence.check` reports them (``short_run`` is an
ensemble's, :func:`core.diagnostics.assess.ensemble_findings`, and a population's,
:func:`core.diagnostics.population.short_run_findings`; ``pareto_k``, ``importance_ess`` and
``unseen_modes`` importance sampling's, :func:`core.diagnostics.assess.importance_findings`; ``swap_rate_low`` and ``evidence_unreliable`` parallel tempering's,
``core.populations.stepping_stones.evidence_findings`` (the second also ``smc``'s);
``smc_unfinished`` sequential Monte Carlo's, ``core.populations.smc_evidence.evidence_findings``)."""


class SamplingWarning(UserWarning):
    """A convergence problem of an in-process run; ``finding`` says which."""

    def __init__(self, finding: Finding) -> None:
        if not isinstance(finding, Finding):  # e.g. rebuilt from ``args`` by pytest-xdist
            raise TypeError(f"a SamplingWarning is made of a Finding, not {type(finding).__name__}")
        super().__init__(finding.message)
        self.finding = finding

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its finding, not its message
        return (SamplingWarning, (self.finding,))


@dataclass(frozen=True, slots=True)
class Finding:
    """One warning about a run.

    Attributes
    ----------
    code
        One of :data:`CODES`.
    parameter
        The parameter it concerns, or ``None``.
    chain
        The chain it concerns, or ``None``.
    value
        The number measured (may be ``inf``).
    threshold
        The bound it crossed.
    message
        The same, for a person.
    """

    code: str
    parameter: str | None
    chain: int | None
    value: float
    threshold: float
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as a plain dictionary."""
        return asdict(self)


HINTS: dict[str, str] = {
    "too_few_draws": "run more iterations after warm-up",
    "nonfinite": "check that the log density is finite wherever it is not -inf",
    "rhat": "run longer (more warm-up and iterations); if it persists, the chains may be "
    "in different modes: look at them one by one",
    "ess_bulk": "run more iterations, or try another algorithm (a kernel sampler on a bent "
    "target); smc: more particles or chains (on separated modes its ESS does not grow with "
    "the run)",
    "ess_tail": "run more iterations, or try another algorithm (a kernel sampler on a bent "
    "target); smc: more particles or chains (on separated modes its ESS does not grow with "
    "the run)",
    "acceptance_low": "run a longer warm-up so that the step size adapts, or start "
    "closer to the mode",
    "acceptance_high": "run a longer warm-up so that the step size adapts",
    "stuck": "run a longer warm-up; with pseudo-marginal estimates, lower their variance",
    "chain_mean": "run longer; if it persists, that chain found another mode",
    "divergent": "raise target_acceptance (e.g. 0.95) for smaller steps, or reparameterise "
    "(a non-centred form of a hierarchical model)",
    "low_ebfmi": "reparameterise (a non-centred form of a hierarchical model), or give the "
    "parameters with heavy tails a transformed scale",
    "short_run": "run more iterations: at least 50 autocorrelation times of sweeps after "
    "warm-up (smc: sweeps enough for its particles to move)",
    "pareto_k": "run a longer warm-up (the proposals are fitted to it), or more chains "
    "started apart (each finds its own part of the target)",
    "importance_ess": "run more iterations, or a longer warm-up so that the proposals fit",
    "unseen_modes": "run many more chains started across the prior (initial_radius), so that "
    "every mode is found by several",
    "swap_rate_low": "give the ladder more temperatures, or a longer warm-up so that it adapts",
    "evidence_unreliable": "run at least 4 chains, longer, or with more temperatures "
    "(smc: more particles, a reference that covers the prior, or a larger max_moves)",
    "smc_unfinished": "run a longer warm-up (smc's stages move the particles until they "
    "mix, more sweeps in more dimensions), or fewer particles, so that the tempering "
    "reaches beta = 1 within it",
}
"""What to try, per code: one line each."""


def group(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per code (in :data:`CODES` order): the parameters and chains it
    concerns named in one message, the worst value, and :data:`HINTS`' line of what to
    try. A code met once keeps its own message."""
    grouped = []
    for code in [*CODES, *sorted({f.code for f in findings} - set(CODES))]:
        same = [f for f in findings if f.code == code]
        if not same:
            continue
        params = list(dict.fromkeys(f.parameter for f in same if f.parameter is not None))
        chains = list(dict.fromkeys(f.chain for f in same if f.chain is not None))
        where = []
        if params:
            where.append(("parameter " if len(params) == 1 else "parameters ") + ", ".join(params))
        if chains:
            where.append(
                ("chain " if len(chains) == 1 else "chains ") + ", ".join(map(str, chains))
            )
        first = same[0]
        message = (
            first.message if len(same) == 1 else f"{_TITLES.get(code, code)}: {'; '.join(where)}"
        )
        hint = HINTS.get(code)
        values = [f.value for f in same]
        worst = max(values, key=lambda v: abs(v) if not math.isnan(v) else -1.0)
        grouped.append(
            Finding(
                code,
                params[0] if len(params) == 1 else None,
                chains[0] if len(chains) == 1 else None,
                worst,
                first.threshold,
                message + (f" (try: {hint})" if hint else ""),
            )
        )
    return grouped


_TITLES = {
    "too_few_draws": "too few post-warm-up draws",
    "nonfinite": "NaN or infinite draws",
    "rhat": "R-hat above 1.01, the chains do not agree yet",
    "ess_bulk": "bulk ESS under 100 per chain",
    "ess_tail": "tail ESS under 100 per chain",
    "acceptance_low": "acceptance under 5% after warm-up",
    "acceptance_high": "acceptance over 95% after warm-up",
    "stuck": "a chain did not move for too long",
    "chain_mean": "a chain's mean is far from the others'",
    "short_run": "the run is shorter than 50 autocorrelation times",
}


def grouped_lines(findings: Sequence[Finding]) -> list[str]:
    """The warnings for a person: one line per code with the parameters and chains it
    concerns, and one line of what to try."""
    lines = []
    for g in group(findings):
        text, _, hint = g.message.partition(" (try: ")
        lines.append(f"warning [{g.code}]: {text}")
        if hint:
            lines.append(f"    try: {hint.removesuffix(')')}")
    return lines
