"""Populations, tempering and evidence: tempered targets
(:mod:`core.populations.tempered`), adaptive annealing
(:mod:`core.populations.annealing`), importance weights and the evidence
(:mod:`core.populations.evidence`, :mod:`core.populations.smc_evidence`,
:mod:`core.populations.stepping_stones`), consensus Monte Carlo
(:mod:`core.populations.consensus`) and the rounds of evaluations handed out together
(:mod:`core.populations.rounds`).
"""
