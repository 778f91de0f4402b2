"""Arithmetic and random numbers with the same bits on every CPU: why, and the
elementary functions (:mod:`core.numerics.arithmetic`), products, factorisations and
distances (:mod:`core.numerics.matrices`), jittered factors and the BLAS's threads
(:mod:`core.numerics.linalg`), Philox (:mod:`core.numerics.philox`) and the streams of
every random number (:mod:`core.numerics.rng`).
"""
