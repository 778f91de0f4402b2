"""Request and response bodies of the HTTP protocol (PROTOCOL.md), as pydantic models.

Numbers are strict: a string where a number belongs is an error, never coerced. Request
models forbid unknown fields, so a typo is a 422 rather than a silently ignored option.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
)

from core import SAMPLERS

__all__ = [
    "ALGORITHMS",
    "AskRequest",
    "AskResponse",
    "ChainSummary",
    "Diagnostics",
    "DrawsChain",
    "DrawsPage",
    "Health",
    "ProblemDetail",
    "ProposalOut",
    "ResetRequest",
    "SessionCreate",
    "SessionList",
    "SessionSummary",
    "StepRequest",
    "StepResponse",
    "TellOutcome",
    "TellRequest",
    "TellResponse",
    "TellResult",
]

ALGORITHMS = tuple(SAMPLERS)
Finite = Annotated[float, Strict(), AllowInfNan(False)]
Count = Annotated[int, Strict()]
#: Largest count a JSON number represents exactly, whatever the client's language.
MAX_COUNT = 2**53


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_utf8)]


def _outside_support(value: Any) -> Any:
    """``null``, ``"-inf"`` and ``"-Infinity"`` mean a point outside the support."""
    if value is None or value in ("-inf", "-Infinity"):
        return -math.inf
    return value


def _not_nan_or_plus_inf(value: float) -> float:
    if math.isnan(value) or value == math.inf:
        raise ValueError("log density must be a number, -Infinity, '-inf' or null; not NaN or +inf")
    return value


LogDensity = Annotated[
    float,
    BeforeValidator(
        _outside_support,
        json_schema_input_type=float | Literal["-inf", "-Infinity"] | None,
    ),
    Strict(),
    AfterValidator(_not_nan_or_plus_inf),
    Field(
        description="log density (or log of an unbiased estimate) at the proposal; "
        "-Infinity, '-inf' or null outside the support. NaN and +inf are errors."
    ),
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------- sessions


class SessionCreate(_Request):
    algorithm: Literal[ALGORITHMS] = Field(  # type: ignore[valid-type]
        description="Sampling algorithm."
    )
    dim: Count = Field(ge=1, le=MAX_COUNT, description="Dimension of the target.")
    chains: Count = Field(1, ge=1, le=MAX_COUNT, description="Independent chains.")
    initial: list[list[Finite]] | None = Field(
        None,
        description="Initial points: one row per chain, or one row for all. Default: the origin.",
    )
    seed: Count | None = Field(
        None, ge=0, le=2**63 - 1, description="Same seed and same told values give the same draws."
    )
    pseudo_marginal: bool = Field(
        False, description="Told values are logs of unbiased estimates of the density."
    )
    warmup: Count = Field(
        1000, ge=0, le=MAX_COUNT, description="Iterations per chain marked warm-up."
    )
    max_iterations: Count | None = Field(
        None,
        ge=1,
        le=MAX_COUNT,
        description="When every chain has reached it, the session is done.",
    )
    param_names: list[Name] | None = Field(
        None, description="One name per dimension; default x0, x1, ..."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Algorithm options; each has a documented default."
    )


ChainStatus = Literal["initial", "needs_initial_point", "warmup", "sampling", "done"]
SessionStatus = Literal["warmup", "sampling", "done"]


class ChainSummary(BaseModel):
    chain: int
    status: ChainStatus
    iterations: int = Field(description="Transitions done (draws recorded).")
    evaluations: int = Field(description="Log densities told and applied.")
    acceptance_rate: float | None
    resets: int = Field(description="New initial points given to this chain.")


class SessionSummary(BaseModel):
    id: str
    algorithm: str
    dim: int
    chains: int
    seed: int
    pseudo_marginal: bool
    warmup: int
    max_iterations: int | None
    param_names: list[str]
    options: dict[str, Any] = Field(description="Options as resolved, defaults included.")
    created_at: datetime
    status: SessionStatus
    iterations: int
    evaluations: int
    acceptance_rate: float | None
    chain_summaries: list[ChainSummary]


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next: str | None = Field(description="Cursor of the next page, or null.")


# ------------------------------------------------------------------------ ask, tell


class AskRequest(_Request):
    max: Count = Field(1, ge=1, le=MAX_COUNT, description="Most proposals to hand out.")
    lease_seconds: Annotated[float, Strict()] | None = Field(
        None, gt=0, description="How long the proposals are reserved; default from settings."
    )


class ProposalOut(BaseModel):
    id: str
    chain: int
    iteration: int
    kind: Literal["init", "proposal"]
    x: list[float]
    lease_expires_at: datetime


class AskResponse(BaseModel):
    proposals: list[ProposalOut]
    status: SessionStatus
    done: bool


class TellResult(_Request):
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    log_density: LogDensity
    gradient: list[Finite] | None = Field(
        None, description="Gradient of the log density; ignored by gradient-free algorithms."
    )


class TellRequest(_Request):
    results: list[TellResult] = Field(description="Results to apply, each exactly once.")


Outcome = Literal["initialized", "outside_support", "accepted", "rejected", "duplicate"]


class TellOutcome(BaseModel):
    id: str
    outcome: Outcome


class TellResponse(BaseModel):
    results: list[TellOutcome]


class StepRequest(_Request):
    results: list[TellResult] = Field(default_factory=list)
    max: Count | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="Most proposals to hand out; default: one per result (at least 1).",
    )
    lease_seconds: Annotated[float, Strict()] | None = Field(None, gt=0)


class StepResponse(BaseModel):
    results: list[TellOutcome]
    proposals: list[ProposalOut]
    status: SessionStatus
    done: bool


class ResetRequest(_Request):
    initial: list[Finite] = Field(description="The chain's new initial point.")


# ------------------------------------------------------------------ draws, diagnostics


class DrawsChain(BaseModel):
    chain: int
    start: int = Field(description="Index of the first draw in this page (within the selection).")
    iterations: list[int]
    draws: list[list[float]]
    log_density: list[float]


class DrawsPage(BaseModel):
    param_names: list[str]
    chains: list[DrawsChain]
    next: str | None = Field(description="URL of the next page, or null.")


class ParameterDiagnostics(BaseModel):
    name: str
    mean: float | None
    sd: float | None
    mcse_mean: float | None
    ess_bulk: float | None
    ess_tail: float | None
    r_hat: float | None


class ChainDiagnostics(BaseModel):
    chain: int
    iterations: int
    draws: int
    acceptance_rate: float | None


class Diagnostics(BaseModel):
    parameters: list[ParameterDiagnostics]
    chains: list[ChainDiagnostics]


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    store: str
    store_ready: bool
    version: str


class ProblemDetail(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None
