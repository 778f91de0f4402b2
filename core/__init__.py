"""Kameleon's samplers: pure numpy/scipy ask/tell state machines.

``SAMPLERS`` maps an algorithm's name to its module (see :mod:`core.base` for the
interface every module has).
"""

from __future__ import annotations

from types import ModuleType

from kameleon.core.samplers import am, kameleon, kmc_finite, kmc_lite, rwm

__all__ = ["DEFAULT_ALGORITHM", "SAMPLERS", "get_sampler"]

SAMPLERS: dict[str, ModuleType] = {
    rwm.NAME: rwm,
    am.NAME: am,
    kameleon.NAME: kameleon,
    kmc_lite.NAME: kmc_lite,
    kmc_finite.NAME: kmc_finite,
}

#: What a user gets without choosing: the sampler right on the most targets of the
#: validation suite (BENCHMARKS.md, "Validation"). The kernel samplers are ahead of it
#: on bent targets given a long warm-up, but not yet as safe on every target.
DEFAULT_ALGORITHM = am.NAME


def get_sampler(name: str) -> ModuleType:
    """The sampler module called ``name``; ``KeyError`` if there is none."""
    return SAMPLERS[name]
