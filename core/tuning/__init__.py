"""Adaptation during warm-up: Robbins-Monro and running moments
(:mod:`core.tuning.adaptation`), the kernel samplers' preconditioning
(:mod:`core.tuning.preconditioning`), Stan's doubling windows
(:mod:`core.tuning.windows`) and reservoir sampling of a chain's history
(:mod:`core.tuning.reservoir`).
"""
