"""Kameleon's samplers: pure numpy/scipy ask/tell state machines.

``SAMPLERS`` maps an algorithm's name to its module (see :mod:`core.base` for the
interface every module has).
"""

from __future__ import annotations

from types import ModuleType

from core.samplers import am, kameleon, kmc_finite, kmc_lite, rwm

__all__ = ["SAMPLERS", "get_sampler"]

SAMPLERS: dict[str, ModuleType] = {
    rwm.NAME: rwm,
    am.NAME: am,
    kameleon.NAME: kameleon,
    kmc_lite.NAME: kmc_lite,
    kmc_finite.NAME: kmc_finite,
}


def get_sampler(name: str) -> ModuleType:
    """The sampler module called ``name``; ``KeyError`` if there is none."""
    return SAMPLERS[name]
