"""Kameleon's samplers: pure numpy/scipy ask/tell state machines.

``SAMPLERS`` maps an algorithm's name to its :class:`~kameleon.core.interface.sampler.Sampler` record
(its module's parts, typed; see :mod:`core.interface.sampler` for the interface).
"""

from __future__ import annotations

from typing import Any

from kameleon.core.interface.sampler import Sampler
from kameleon.core.samplers import (
    am,
    ensemble,
    gibbs,
    hmc,
    importance,
    kameleon,
    kmc_finite,
    kmc_lite,
    mala,
    nuts,
    rwm,
    sgld,
    smc,
    tempering,
)

__all__ = ["DEFAULT_ALGORITHM", "SAMPLERS"]

SAMPLERS: dict[str, Sampler[Any, Any]] = {
    s.name: s
    for s in (
        rwm.SAMPLER,
        am.SAMPLER,
        kameleon.SAMPLER,
        kmc_lite.SAMPLER,
        kmc_finite.SAMPLER,
        mala.SAMPLER,
        hmc.SAMPLER,
        nuts.SAMPLER,
        sgld.SAMPLER,
        gibbs.SAMPLER,
        importance.SAMPLER,
        ensemble.SAMPLER,
        tempering.SAMPLER,
        smc.SAMPLER,
    )
}

#: What a user gets without choosing: the sampler right on the most targets of the
#: validation suite (BENCHMARKS.md, "Validation"). The kernel samplers are ahead of it
#: on bent targets given a long warm-up, but not yet as safe on every target.
DEFAULT_ALGORITHM = am.NAME
