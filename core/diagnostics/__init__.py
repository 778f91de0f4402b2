"""What a run's draws say: the per-parameter summary, R-hat and ESS
(:mod:`core.diagnostics.summary`, :mod:`core.diagnostics.ess`), the warnings
(:mod:`core.diagnostics.findings`, :mod:`core.diagnostics.trajectory_checks`,
:mod:`core.diagnostics.population`), the autocorrelation time of an ensemble
(:mod:`core.diagnostics.autocorr`), the stopping rule (:mod:`core.diagnostics.stopping`)
and the assessment every runner gives (:mod:`core.diagnostics.assess`).
"""
