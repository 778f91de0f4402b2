"""The service's one door into :mod:`kameleon.core`: everything the service uses of the
samplers, their codec, their diagnostics and their defaults, imported here and nowhere
else under ``service/`` (``tests/test_layering.py`` checks it).

What core offers the service is then read in one place, and a change of core's layout
touches this module alone. The names are core's own; the few renamed say what they are
out of their module (``round_size`` for :func:`kameleon.core.populations.rounds.size`).
"""

from __future__ import annotations

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.core.diagnostics.assess import assess
from kameleon.core.diagnostics.findings import CODES, StopRule
from kameleon.core.diagnostics.population import population_summaries
from kameleon.core.diagnostics.summary import MIN_DRAWS, ess_bulk, rhat
from kameleon.core.interface.chain import FloatArray, Parts, Proposal, StepInfo, reset, slot_init
from kameleon.core.interface.codec import CodecError, Memo
from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.core.interface.documents import cold_changed, decode, encode
from kameleon.core.interface.memory import COPIES, chain_bytes, chain_floats
from kameleon.core.interface.memory import describe as describe_memory
from kameleon.core.interface.options import OptionError, describe_params
from kameleon.core.interface.sampler import Sampler, takes_steps, tell_one, transition_stats
from kameleon.core.numerics.linalg import single_threaded_blas
from kameleon.core.populations.consensus import ConsensusError, combine, shard_warnings
from kameleon.core.populations.rounds import offset as round_offset
from kameleon.core.populations.rounds import proposals as round_proposals
from kameleon.core.populations.rounds import size as round_size
from kameleon.core.running.batch import ask_many, tell_many
from kameleon.core.running.initial import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RADIUS,
    initial_point,
    redraw,
    start_radius,
)

__all__ = [
    "CHAINS",
    "CODES",
    "COPIES",
    "DEFAULT_ALGORITHM",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RADIUS",
    "ITERATIONS",
    "MIN_DRAWS",
    "SAMPLERS",
    "WARMUP",
    "CodecError",
    "ConsensusError",
    "FloatArray",
    "Memo",
    "OptionError",
    "Parts",
    "Proposal",
    "Sampler",
    "StepInfo",
    "StopRule",
    "ask_many",
    "assess",
    "chain_bytes",
    "chain_floats",
    "cold_changed",
    "combine",
    "decode",
    "describe_memory",
    "describe_params",
    "encode",
    "ess_bulk",
    "initial_point",
    "population_summaries",
    "redraw",
    "reset",
    "rhat",
    "round_offset",
    "round_proposals",
    "round_size",
    "shard_warnings",
    "single_threaded_blas",
    "slot_init",
    "start_radius",
    "takes_steps",
    "tell_many",
    "tell_one",
    "transition_stats",
]
