"""The validation suite: its cases (:mod:`core.validation.cases`), how a sampler is run
and judged on one (:mod:`core.validation.suite`), and the targets with known answers
(:mod:`core.validation.targets`).
"""
