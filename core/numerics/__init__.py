"""Arithmetic and random numbers with the same bits on every CPU: products, factorisations
and elementary functions (:mod:`core.numerics.arithmetic`), the BLAS's threads
(:mod:`core.numerics.linalg`), Philox (:mod:`core.numerics.philox`) and the streams of
every random number (:mod:`core.numerics.rng`).
"""
