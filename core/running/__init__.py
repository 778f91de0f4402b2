"""Samplers run in process: :func:`core.running.inprocess.sample` and its chains
(:mod:`core.running.chains`), many chains stepped together (:mod:`core.running.batch`)
and the chains' starting points (:mod:`core.running.initial`).
"""
