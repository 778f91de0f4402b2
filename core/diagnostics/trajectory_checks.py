"""The Hamiltonian samplers' own warnings, as Stan gives them: divergent transitions and
a low E-BFMI (Betancourt 2016, "Diagnosing suboptimal cotangent disintegrations in
Hamiltonian Monte Carlo"; Betancourt 2017, "A conceptual introduction to Hamiltonian
Monte Carlo", section 6).

``divergent``
    Transitions after warm-up whose trajectory diverged (its energy error above 1000,
    or a point outside the support or beyond the float range): the integrator cannot
    follow the posterior's curvature there, so the draws may miss that region and be
    biased, however good R-hat looks. Any is one too many. ``value``: how many.
``low_ebfmi``
    A chain's energy Bayesian fraction of missing information below :data:`EBFMI_MIN`
    (0.3): the momentum's resampling moves the energy too little for the marginal energy
    distribution (heavy tails, a funnel), and the chain explores slowly or not at all.
    ``value``: the chain's E-BFMI.

Both are computed from the per-draw statistics the samplers record (their record's
``stats``: ``diverging`` and ``energy``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kameleon.core.interface.chain import FloatArray

__all__ = ["EBFMI_MIN", "ebfmi", "trajectory_findings"]

#: Below this a chain's E-BFMI warns (Stan's bound).
EBFMI_MIN = 0.3


def ebfmi(energy: npt.ArrayLike) -> FloatArray:
    """Each chain's E-BFMI, ``sum((E_t - E_(t-1))^2) / sum((E_t - mean E)^2)``, from the
    Hamiltonian at each draw, shape ``(chains, draws)``; NaN for a chain with fewer than
    two draws or a constant energy."""
    e = np.asarray(energy, dtype=np.float64)
    out = np.full(e.shape[0], np.nan)
    for c in range(e.shape[0]):
        chain = e[c][np.isfinite(e[c])]
        if chain.size < 2:
            continue
        spread = float(np.sum((chain - chain.mean()) ** 2))
        if spread > 0.0:
            out[c] = float(np.sum(np.diff(chain) ** 2)) / spread
    return out


def trajectory_findings(
    divergent: npt.ArrayLike | None, energy: npt.ArrayLike | None
) -> list[tuple[str, str | None, int | None, float, float, str]]:
    """The ``divergent`` and ``low_ebfmi`` findings (as the fields of
    :class:`core.diagnostics.findings.Finding`) of post-warm-up draws' ``diverging`` flags and
    ``energy``, each of shape ``(chains, draws)`` or ``None`` (not recorded)."""
    out: list[tuple[str, str | None, int | None, float, float, str]] = []
    if divergent is not None:
        flags = np.asarray(divergent, dtype=np.float64)
        count = int(np.count_nonzero(flags > 0.5))
        if count:
            out.append(
                (
                    "divergent",
                    None,
                    None,
                    float(count),
                    0.0,
                    f"{count} of {flags.size} transitions after warm-up diverged: the "
                    "sampler could not follow the posterior's curvature there, and the "
                    "draws may be biased (they miss where it diverged) even if R-hat "
                    "looks fine.",
                )
            )
    if energy is not None:
        for c, value in enumerate(ebfmi(energy)):
            if np.isfinite(value) and value < EBFMI_MIN:
                out.append(
                    (
                        "low_ebfmi",
                        None,
                        c,
                        float(value),
                        EBFMI_MIN,
                        f"chain {c} has an E-BFMI of {value:.2f}, below {EBFMI_MIN}: its "
                        "momentum resampling hardly moves the energy, and it explores "
                        "the posterior slowly (heavy tails, or a funnel).",
                    )
                )
    return out
