"""The validation suite (:mod:`core.validation.suite`) and its targets with known answers
(:mod:`core.validation.targets`).
"""
