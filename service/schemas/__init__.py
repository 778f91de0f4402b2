"""Request and response bodies of the HTTP protocol (PROTOCOL.md), as pydantic models:
:mod:`.types` (what every body shares), :mod:`.sessions` (the session endpoints),
:mod:`.sampling` (the ask/tell loop), and the reports of :mod:`kameleon.service.reports`.

Numbers are strict: a string where a number belongs is an error, never coerced. Request
models forbid unknown fields, so a typo is a 422 rather than a silently ignored option.
"""

from __future__ import annotations

from kameleon.service.reports import (
    Diagnostics,
    DrawsChain,
    DrawsPage,
    Health,
    ProblemDetail,
    Trace,
    WarningOut,
    Weights,
)
from kameleon.service.schemas.consensus import (
    ConsensusRequest,
    ConsensusResponse,
    ConsensusShard,
    ConsensusWarning,
)
from kameleon.service.schemas.sampling import (
    AskRequest,
    AskResponse,
    LeaseOut,
    LeasesRequest,
    LeasesResponse,
    ProposalOut,
    ResetRequest,
    StepRequest,
    StepResponse,
    TellOutcome,
    TellRequest,
    TellResponse,
    TellResult,
)
from kameleon.service.schemas.sessions import (
    ChainSummary,
    SessionCreate,
    SessionList,
    SessionSummary,
    SessionUpdate,
    StopRuleIn,
    StopRuleOut,
)
from kameleon.service.schemas.types import ALGORITHMS

__all__ = [
    "ALGORITHMS",
    "AskRequest",
    "AskResponse",
    "ChainSummary",
    "ConsensusRequest",
    "ConsensusResponse",
    "ConsensusShard",
    "ConsensusWarning",
    "Diagnostics",
    "DrawsChain",
    "DrawsPage",
    "Health",
    "LeaseOut",
    "LeasesRequest",
    "LeasesResponse",
    "ProblemDetail",
    "ProposalOut",
    "ResetRequest",
    "SessionCreate",
    "SessionList",
    "SessionSummary",
    "SessionUpdate",
    "StepRequest",
    "StepResponse",
    "StopRuleIn",
    "StopRuleOut",
    "TellOutcome",
    "TellRequest",
    "TellResponse",
    "TellResult",
    "Trace",
    "WarningOut",
    "Weights",
]
