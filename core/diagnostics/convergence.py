"""The convergence checks of a run's draws: :func:`check` looks at the post-warm-up draws
of every chain and each chain's acceptance rate after warm-up and returns a
:class:`~core.diagnostics.findings.Finding` for each thing that is wrong, judged by the
thresholds below (what each code means: :mod:`core.diagnostics.findings`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kameleon.core.diagnostics.findings import Finding
from kameleon.core.diagnostics.summary import MIN_DRAWS, ParameterSummary, chain_mean_z, summarize
from kameleon.core.diagnostics.trajectory_checks import trajectory_findings
from kameleon.core.interface.chain import FloatArray

__all__ = [
    "ACCEPTANCE_MAX",
    "ACCEPTANCE_MIN",
    "CHAIN_Z_MAX",
    "DRIFT_MAGNITUDE",
    "ESS_PER_CHAIN_MIN",
    "RHAT_MAX",
    "chain_mean_findings",
    "check",
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
    """The warnings of a run, in the order of :data:`~core.diagnostics.findings.CODES`, parameters and chains.

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
