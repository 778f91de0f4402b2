"""Convergence checks of a run: the warnings a user should read, and the stopping rule.

:func:`check` looks at the post-warm-up draws of every chain and each chain's
acceptance rate after warm-up, and returns a list of :class:`Finding`, one per thing
that is wrong, each with a stable ``code``, the parameter or chain it concerns, the
number measured and the threshold it crossed. The service returns them as JSON
(``warnings``); :func:`core.running.inprocess.sample` emits them as :class:`SamplingWarning`.

Codes (stable; thresholds are module constants):

``too_few_draws``
    Fewer than :data:`~core.diagnostics.summary.MIN_DRAWS` post-warm-up draws per chain: R-hat
    and ESS are undefined, nothing else is judged. ``value``: draws per chain.
``nonfinite``
    A parameter has draws that are NaN or infinite. ``value``: how many.
``improper``
    The chains drift without settling, as they do on a target that is not normalisable
    (a flat or unbounded log density, e.g. a parameter without a prior): the chains do
    not agree (some R-hat above :data:`RHAT_MAX`) and either a parameter whose R-hat
    warns reaches :data:`DRIFT_MAGNITUDE` in magnitude, or every chain's post-warm-up
    log density (when known) keeps rising (its second half never comes back down to the
    highest value of its first) or never changes while the chain accepts more than
    :data:`ACCEPTANCE_MAX` of its proposals (a uniform target on a bounded support
    rejects those that leave it). One finding
    for the run; ``value``: the largest magnitude a draw reached, ``parameter``: whose.
    It says all that ``rhat``, ``ess_bulk``, ``ess_tail``, ``acceptance_low``,
    ``acceptance_high``, ``stuck`` and ``chain_mean`` would, which are then not
    reported. A proper target whose warm-up was far too short for it to be found can
    also rise throughout; the message says so.
``rhat``
    Rank-normalised split R-hat above :data:`RHAT_MAX` (1.01): the chains do not agree
    yet. ``value`` is ``inf`` for chains stuck at different points.
``ess_bulk``, ``ess_tail``
    Bulk or tail ESS below :data:`ESS_PER_CHAIN_MIN` (100) per chain: too few
    effective draws to trust R-hat, the mean (bulk) or the 5% and 95% quantiles (tail).
    ``threshold`` is 100 times the number of chains.
``acceptance_low``, ``acceptance_high``
    A chain accepted fewer than :data:`ACCEPTANCE_MIN` (5%) or more than
    :data:`ACCEPTANCE_MAX` (95%) of its proposals after warm-up: steps too large (the
    chain hardly moves) or too small (it moves by tiny steps).
``stuck``
    A chain's longest run of identical consecutive draws is longer than
    :func:`stuck_threshold` of the number of draws. ``value``: the run's length.
``chain_mean``
    A chain's mean, on the rank-normalised scale, lies more than :data:`CHAIN_Z_MAX`
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
  rate that does not warn already (``a`` = 5%), :func:`stuck_threshold` is the run
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

import numpy as np
import numpy.typing as npt

from kameleon.core.diagnostics.stopping import StopRule
from kameleon.core.diagnostics.summary import MIN_DRAWS, ParameterSummary, chain_mean_z, summarize
from kameleon.core.diagnostics.trajectory_checks import trajectory_findings
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "ACCEPTANCE_MAX",
    "ACCEPTANCE_MIN",
    "CHAIN_Z_MAX",
    "CODES",
    "DRIFT_MAGNITUDE",
    "ESS_PER_CHAIN_MIN",
    "HINTS",
    "RHAT_MAX",
    "Finding",
    "SamplingWarning",
    "StopRule",
    "chain_mean_findings",
    "check",
    "group",
    "grouped_lines",
    "longest_run",
    "stuck_threshold",
]

RHAT_MAX = 1.01
"""R-hat above this warns (Vehtari et al. 2021)."""
ESS_PER_CHAIN_MIN = 100
"""Bulk or tail ESS below this many per chain warns (Vehtari et al. 2021)."""
ACCEPTANCE_MIN = 0.05
"""Post-warm-up acceptance rate below this warns."""
ACCEPTANCE_MAX = 0.95
"""Post-warm-up acceptance rate above this warns."""
CHAIN_Z_MAX = 5.0
"""A chain mean this many Monte Carlo standard errors from the others' warns."""
DRIFT_MAGNITUDE = 1e15
"""Draws this large in magnitude, of a parameter whose chains do not agree, are taken for
chains drifting on an improper target: fifteen orders of magnitude beyond the unit scale
of the samplers' first proposals. The adapted scale of a flat direction grows from one
warm-up window to the next, past 1e18 within a default warm-up; a proper target this
wide that has not converged warns as improper too."""
_STUCK_ACCEPTANCE = ACCEPTANCE_MIN
_STUCK_FALSE_ALARM = 0.01

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
"""Every finding's code, in the order :func:`check` reports them (``short_run`` is an
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


def stuck_threshold(draws: int) -> int:
    """The longest run of identical draws that a chain of ``draws`` draws may show.

    A chain that accepts 5% of its proposals (the lowest rate that does not warn on its
    own) exceeds it with probability below 1%: ``log(draws / 0.01) / -log(0.95)``.
    """
    return math.ceil(math.log(max(draws, 1) / _STUCK_FALSE_ALARM) / -math.log1p(-_STUCK_ACCEPTANCE))


def longest_run(chain: npt.ArrayLike) -> int:
    """The longest run of identical consecutive rows of ``chain``, shape ``(draws, dim)``."""
    rows = np.asarray(chain, dtype=np.float64)
    if rows.shape[0] == 0:
        return 0
    rows = rows.reshape(rows.shape[0], -1)
    same = np.all(rows[1:] == rows[:-1], axis=1)
    # Run boundaries: where a row differs from the one before.
    starts = np.flatnonzero(np.concatenate(([True], ~same, [True])))
    return int(np.diff(starts).max())


def check(
    draws: npt.ArrayLike,
    names: Sequence[str],
    acceptance: Sequence[float | None] | None = None,
    *,
    summaries: Sequence[ParameterSummary] | None = None,
    log_density: npt.ArrayLike | None = None,
    divergent: npt.ArrayLike | None = None,
    energy: npt.ArrayLike | None = None,
) -> list[Finding]:
    """The warnings of a run, in the order of :data:`CODES`, parameters and chains.

    Parameters
    ----------
    draws
        Post-warm-up draws, shape ``(chains, draws, dim)``.
    names
        The ``dim`` parameter names.
    acceptance
        Each chain's acceptance rate after warm-up (``None`` or NaN where unknown), or
        ``None`` to skip the acceptance checks.
    summaries
        ``summarize(draws, names)``, when already computed.
    log_density
        The chains' log density at each draw, shape ``(chains, draws)``, or ``None``
        (then ``improper`` judges by the draws' magnitude alone).
    divergent, energy
        A Hamiltonian sampler's per-draw ``diverging`` flags and Hamiltonian, shape
        ``(chains, draws)``, for the ``divergent`` and ``low_ebfmi`` findings
        (:mod:`core.diagnostics.trajectory_checks`); ``None`` where not recorded.

    Returns
    -------
    list of Finding
        Empty when nothing is wrong.
    """
    values = np.asarray(draws, dtype=np.float64)
    if values.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, dim), not {values.shape}")
    m, n, _ = values.shape
    if m == 0:
        return []
    if n < MIN_DRAWS:
        return [
            Finding(
                "too_few_draws",
                None,
                None,
                float(n),
                float(MIN_DRAWS),
                f"{n} post-warm-up draws per chain are too few to judge convergence "
                f"(R-hat and ESS need at least {MIN_DRAWS}).",
            )
        ]
    if summaries is None:
        summaries = summarize(values, names)
    found = _nonfinite(values, names)
    improper = _improper(values, summaries, log_density, acceptance)
    if improper is not None:  # it says what the checks below would
        return [*found, improper]
    found += [f for p in summaries if (f := _rhat(p)) is not None]
    ess_min = float(ESS_PER_CHAIN_MIN * m)
    found += _ess(summaries, ess_min)
    if acceptance is not None:
        found += _acceptance(acceptance)
    found += _stuck(values)
    # A chain's own MCSE is an estimate good enough to compare chains by only when the
    # chains have enough effective draws; with fewer, ``ess_bulk`` has already warned.
    judged = [k for k, p in enumerate(summaries) if p["ess_bulk"] >= ess_min]
    found += _chain_means(values, names, judged)
    found += [Finding(*f) for f in trajectory_findings(divergent, energy)]
    return found


def _nonfinite(values: FloatArray, names: Sequence[str]) -> list[Finding]:
    bad = np.count_nonzero(~np.isfinite(values), axis=(0, 1))
    return [
        Finding(
            "nonfinite",
            name,
            None,
            float(count),
            0.0,
            f"{name} has {count} draws that are NaN or infinite.",
        )
        for name, count in zip(names, bad, strict=True)
        if count
    ]


def _improper(
    values: FloatArray,
    summaries: Sequence[ParameterSummary],
    log_density: npt.ArrayLike | None,
    acceptance: Sequence[float | None] | None,
) -> Finding | None:
    """The ``improper`` finding (see the module docstring), or ``None``."""
    unsettled = [k for k, p in enumerate(summaries) if p["r_hat"] > RHAT_MAX]
    if not unsettled:
        return None
    with np.errstate(invalid="ignore"):
        magnitude = np.nanmax(np.where(np.isfinite(values), np.abs(values), np.nan), axis=(0, 1))
    magnitude = np.nan_to_num(magnitude, nan=0.0)
    k = max(unsettled, key=lambda j: float(magnitude[j]))
    how = None
    if magnitude[k] >= DRIFT_MAGNITUDE:
        how = f"they reach {magnitude[k]:.3g} in {summaries[k]['name']}"
    elif log_density is not None:
        how = _drifting_log_density(np.asarray(log_density, dtype=np.float64), acceptance)
    if how is None:
        return None
    worst = int(np.argmax(magnitude))
    return Finding(
        "improper",
        summaries[worst]["name"],
        None,
        float(magnitude[worst]),
        DRIFT_MAGNITUDE,
        f"the chains drift without settling ({how}): the target may be improper (not "
        "normalisable): a flat or unbounded log density, e.g. a missing prior. If it is "
        "proper, the warm-up was far too short to find its mass.",
    )


def _drifting_log_density(
    log_density: FloatArray, acceptance: Sequence[float | None] | None
) -> str | None:
    """How every chain's log density drifts, if it does: flat while the chain accepts
    nearly everything, or rising (see the module docstring); else ``None``."""
    if log_density.ndim != 2 or log_density.shape[1] < 2:
        return None
    flat = rising = 0
    half = log_density.shape[1] // 2
    for c in range(log_density.shape[0]):
        chain = log_density[c]
        if not np.all(np.isfinite(chain)):
            return None
        if np.all(chain == chain[0]):
            rate = acceptance[c] if acceptance is not None else None
            if rate is None or not rate > ACCEPTANCE_MAX:
                return None
            flat += 1
        elif chain[half:].min() >= chain[:half].max() and chain[-1] > chain[0]:
            rising += 1
        else:
            return None
    if rising == 0:
        return "the log density is the same at every draw, and nearly every proposal is accepted"
    if flat == 0:
        return "the log density of every chain keeps rising"
    return "the log density of every chain keeps rising or never changes"


def _ess(summaries: Sequence[ParameterSummary], ess_min: float) -> list[Finding]:
    """Every bulk ESS finding, then every tail ESS finding."""
    found = []
    for kind, label in (("ess_bulk", "bulk"), ("ess_tail", "tail")):
        for p in summaries:
            ess = p["ess_bulk"] if kind == "ess_bulk" else p["ess_tail"]
            if ess < ess_min:
                message = (
                    f"{label} ESS of {p['name']} is {ess:.0f}, under {ESS_PER_CHAIN_MIN} "
                    f"per chain ({ess_min:.0f}): run longer."
                )
                found.append(Finding(kind, p["name"], None, ess, ess_min, message))
    return found


def _rhat(p: ParameterSummary) -> Finding | None:
    r = p["r_hat"]
    if not r > RHAT_MAX:  # NaN: undefined, reported otherwise
        return None
    return Finding(
        "rhat",
        p["name"],
        None,
        r,
        RHAT_MAX,
        f"R-hat of {p['name']} is {r:.4f}, over {RHAT_MAX}: the chains do not agree yet; "
        "run longer, or look for several modes.",
    )


def _acceptance(acceptance: Sequence[float | None]) -> list[Finding]:
    found = []
    for c, rate in enumerate(acceptance):
        if rate is None or math.isnan(rate):
            continue
        if rate < ACCEPTANCE_MIN:
            found.append(
                Finding(
                    "acceptance_low",
                    None,
                    c,
                    rate,
                    ACCEPTANCE_MIN,
                    f"chain {c} accepted {rate:.1%} of its proposals after warm-up, under "
                    f"{ACCEPTANCE_MIN:.0%}: its steps are too large, or warm-up too short.",
                )
            )
        elif rate > ACCEPTANCE_MAX:
            found.append(
                Finding(
                    "acceptance_high",
                    None,
                    c,
                    rate,
                    ACCEPTANCE_MAX,
                    f"chain {c} accepted {rate:.1%} of its proposals after warm-up, over "
                    f"{ACCEPTANCE_MAX:.0%}: its steps are too small, or warm-up too short.",
                )
            )
    return found


def _stuck(values: FloatArray) -> list[Finding]:
    limit = stuck_threshold(values.shape[1])
    found = []
    for c in range(values.shape[0]):
        run = longest_run(values[c])
        if run > limit:
            found.append(
                Finding(
                    "stuck",
                    None,
                    c,
                    float(run),
                    float(limit),
                    f"chain {c} did not move for {run} consecutive draws (more than {limit}).",
                )
            )
    return found


def _chain_means(values: FloatArray, names: Sequence[str], judged: list[int]) -> list[Finding]:
    if values.shape[0] < 2 or not judged:
        return []
    z = np.stack([chain_mean_z(values[:, :, k]) for k in judged], axis=1)
    return chain_mean_findings(z, names, judged)


def chain_mean_findings(
    z: FloatArray,
    names: Sequence[str],
    judged: Sequence[int],
    *,
    what: str = "mean",
    errors: str = "Monte Carlo standard errors",
    why: str = "",
) -> list[Finding]:
    """``chain_mean``: for each chain (a row of ``z``, ``(chains, len(judged))``, each
    chain's mean of each judged parameter in standard errors from the other chains'),
    its worst parameter when over :data:`CHAIN_Z_MAX`; ``what`` names the chain's
    statistic, ``errors`` the errors' kind, ``why`` a sentence after the message."""
    found = []
    for c in range(z.shape[0]):
        row = np.where(np.isnan(z[c]), 0.0, np.abs(z[c]))
        j = int(np.argmax(row))
        if row[j] > CHAIN_Z_MAX:
            k, value = judged[j], float(z[c, j])
            side = "above" if value > 0 else "below"
            found.append(
                Finding(
                    "chain_mean",
                    names[k],
                    c,
                    value,
                    CHAIN_Z_MAX,
                    f"chain {c}'s {what} of {names[k]} lies {abs(value):.3g} {errors} "
                    f"{side} the other chains' (over {CHAIN_Z_MAX:g})"
                    + (f": {why}" if why else "."),
                )
            )
    return found
