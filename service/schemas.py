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
    field_validator,
    model_validator,
)

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.core.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.core.initial import DEFAULT_MAX_ATTEMPTS, DEFAULT_RADIUS
from kameleon.service.reports import (
    Diagnostics,
    DrawsChain,
    DrawsPage,
    Health,
    ProblemDetail,
    Trace,
    WarningOut,
)

__all__ = [
    "ALGORITHMS",
    "AskRequest",
    "AskResponse",
    "ChainSummary",
    "Diagnostics",
    "DrawsChain",
    "DrawsPage",
    "Health",
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
    "TellOutcome",
    "TellRequest",
    "TellResponse",
    "TellResult",
    "Trace",
    "WarningOut",
]

ALGORITHMS = tuple(SAMPLERS)
Finite = Annotated[float, Strict(), AllowInfNan(False)]
Count = Annotated[int, Strict()]
#: Largest count a JSON number represents exactly, whatever the client's language.
MAX_COUNT = 2**53
#: Most starting points a session may draw per chain.
MAX_INITIAL_ATTEMPTS = 10_000


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


def _one_row(value: Any) -> Any:
    """A flat list of numbers as ``initial`` is one row, for every chain."""
    if isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
        return [value]
    return value


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------- sessions


class StopRuleIn(_Request):
    """Stop the session once every parameter has converged by these bounds.

    Checked whenever the chain with the fewest post-warm-up draws reaches a multiple of
    `check_every` of them, on the post-warm-up draws of every chain (cut to a common
    length); a check reads every post-warm-up draw, so it costs more as they grow. Met:
    the session is done (`stopped_by: "rule"`), and ask and step hand out no more
    proposals. Results for proposals handed out before are still applied and recorded,
    so those chains may end a draw longer than the others.
    """

    rhat: Finite = Field(
        1.01, gt=1.0, description="Every parameter's rank-normalised split R-hat below this."
    )
    ess: Finite = Field(
        400.0, gt=0, description="Every parameter's bulk and tail ESS, over all chains, above this."
    )
    check_every: Count = Field(
        1000,
        ge=100,
        le=MAX_COUNT,
        description="Post-warm-up draws per chain between two checks.",
    )


class SessionCreate(_Request):
    algorithm: str = Field(
        DEFAULT_ALGORITHM,
        # The registry's names when the schema is made; a request is checked against
        # the registry as it is (_registered), so a sampler is one registry entry.
        json_schema_extra={"enum": list(ALGORITHMS)},
        description=(
            "Sampling algorithm (default `am`, Adaptive Metropolis: right on the most "
            "targets of the validation suite). The kernel samplers `kameleon`, "
            "`kmc-lite` and `kmc-finite` learn a target's nonlinear shape and need a "
            "longer warm-up (a few thousand iterations): see the README."
        ),
    )
    dim: Count = Field(ge=1, le=MAX_COUNT, description="Dimension of the target.")
    chains: Count = Field(CHAINS, ge=1, le=MAX_COUNT, description="Independent chains.")
    initial: Annotated[
        list[list[Finite]] | None,
        BeforeValidator(_one_row, json_schema_input_type=list[list[float]] | list[float] | None),
    ] = Field(
        None,
        description="Initial points: one row per chain, or one row for all (a flat list of "
        "dim numbers is that one row). Used exactly unless initial_radius is given. Default: "
        "each chain starts at its own point drawn uniformly from "
        f"(-{DEFAULT_RADIUS:g}, {DEFAULT_RADIUS:g}) per coordinate.",
    )
    initial_radius: Finite | None = Field(
        None,
        gt=0,
        description="Draw each chain's starting point uniformly from initial ± "
        "initial_radius per coordinate (from ± initial_radius without initial). Default: "
        f"{DEFAULT_RADIUS:g} without initial; with initial, none (initial used exactly).",
    )
    max_initial_attempts: Count = Field(
        DEFAULT_MAX_ATTEMPTS,
        ge=1,
        le=MAX_INITIAL_ATTEMPTS,
        description="A drawn starting point told outside the support is replaced by a new "
        "draw, up to this many points per chain; then the chain needs_initial_point.",
    )
    seed: Count | None = Field(
        None,
        ge=0,
        le=2**63 - 1,
        description="Same seed and same told values give the same draws. Without one, the "
        "session draws a seed below 2**53, which every JSON reader gives back exactly; a "
        "seed of your own is best below 2**53 too.",
    )
    pseudo_marginal: bool = Field(
        False, description="Told values are logs of unbiased estimates of the density."
    )
    warmup: Count = Field(
        WARMUP, ge=0, le=MAX_COUNT, description="Iterations per chain marked warm-up."
    )
    max_iterations: Count | None = Field(
        None,
        ge=1,
        le=MAX_COUNT,
        description="Iterations per chain, warm-up included (not the initial point): when "
        "every chain has reached it, the session is done. Absent: "
        f"`warmup + {ITERATIONS}` ({ITERATIONS} draws kept after warm-up). `null`: no "
        "limit; the session ends by its stopping rule, or when its memory quota is used "
        'up (`stopped_by: "quota"`).',
    )
    param_names: list[Name] | None = Field(
        None, description="One name per dimension; default x0, x1, ..."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Algorithm options; each has a documented default."
    )
    stop: StopRuleIn | None = Field(
        None,
        description="Stopping rule: the session is done when it is met or when every chain "
        "has reached max_iterations, whichever comes first.",
    )

    @field_validator("algorithm")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in SAMPLERS:
            raise ValueError(f"algorithm must be one of {', '.join(map(repr, SAMPLERS))}")
        return value

    @model_validator(mode="after")
    def _default_max_iterations(self) -> SessionCreate:
        """No ``max_iterations`` field: warm-up and then the default draws per chain; an
        explicit ``null`` stays open-ended."""
        if "max_iterations" not in self.model_fields_set:
            self.max_iterations = min(self.warmup + ITERATIONS, MAX_COUNT)
        return self


class SessionUpdate(_Request):
    """What an update changes; a field left out stays as it is."""

    max_iterations: Count | None = Field(
        None,
        ge=1,
        le=MAX_COUNT,
        description="A later end: iterations per chain, warm-up included, at least the "
        "current `max_iterations` and every chain's iterations. `null`: no limit.",
    )
    stop: StopRuleIn | None = Field(
        None, description="Another stopping rule (a tighter one, say); `null`: none."
    )


ChainStatus = Literal["initial", "needs_initial_point", "warmup", "sampling", "done"]
SessionStatus = Literal["warmup", "sampling", "needs_initial_point", "done"]
_SESSION_STATUS = (
    "done: every chain reached max_iterations, or the session's stopping rule was met; "
    "needs_initial_point: some chain's initial point is outside the support and it waits "
    "for POST .../chains/{chain}/reset (it will never finish without one); otherwise "
    "warmup while any chain is in warm-up, then sampling."
)


class StopRuleOut(BaseModel):
    rhat: float
    ess: float
    check_every: int


class ChainSummary(BaseModel):
    chain: int
    status: ChainStatus = Field(
        description="initial: its initial point is to be evaluated; needs_initial_point: "
        "that point is outside the support and was not replaced by a draw (a given point, "
        "or max_initial_attempts drawn ones): the chain waits for a reset; warmup, "
        "sampling, done: its iterations against warmup and max_iterations."
    )
    iterations: int = Field(description="Transitions done (draws recorded).")
    evaluations: int = Field(description="Log densities told and applied.")
    acceptance_rate: float | None
    resets: int = Field(
        description="New initial points given to this chain: by a reset, or drawn in place "
        "of one outside the support."
    )


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
    initial_radius: float | None = Field(
        description="Half-width of the box starting points are drawn from; null: the "
        "given initial points are used exactly."
    )
    max_initial_attempts: int
    created_at: datetime
    status: SessionStatus = Field(description=_SESSION_STATUS)
    iterations: int
    evaluations: int
    acceptance_rate: float | None
    chain_summaries: list[ChainSummary]
    stop: StopRuleOut | None = Field(description="The stopping rule, or null.")
    stopped_by: Literal["rule", "max_iterations", "quota", "sampler_error"] | None = Field(
        description="Why the session is done: its stopping rule was met, every chain "
        "reached max_iterations, (a session without max_iterations) the memory its "
        "further draws need would pass a quota (max_bytes_per_key, max_bytes_total or "
        "max_session_bytes), or the sampler failed on a chain (a defect: the request "
        "that met it answered 422 `sampler-failed`); null while it is not done."
    )
    warnings: list[WarningOut] | None = Field(
        description="The warnings of the latest diagnostics (computed by GET .../diagnostics "
        "or by a check of the stopping rule; a summary never computes them), or null "
        "before any. They may be older than the draws: see warnings_draws."
    )
    warnings_draws: int | None = Field(
        description="Post-warm-up draws per chain (the chains cut to a common length) "
        "that the warnings were computed on; null before any."
    )


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next: str | None = Field(description="Cursor of the next page, or null.")


# ------------------------------------------------------------------------ ask, tell


RequestId = Annotated[
    str,
    StringConstraints(pattern=r"^[!-~]{1,128}$"),
    Field(
        description="Names this request (1 to 128 printable ASCII characters, no spaces), "
        "so that a retry of it, within the lease, gets the same proposals back instead of "
        "others or none: a lost answer strands nothing. Use a new one per request, the "
        "same one for its retries."
    ),
]
WaitSeconds = Annotated[
    float,
    Strict(),
    Field(
        ge=0,
        description="Long poll: when there is nothing to hand out, hold the request until "
        "a proposal frees up or this many seconds pass (at most the configured maximum, "
        "30 unless configured). Default 0: answer at once.",
    ),
]


class AskRequest(_Request):
    max: Count = Field(1, ge=1, le=MAX_COUNT, description="Most proposals to hand out.")
    lease_seconds: Annotated[float, Strict()] | None = Field(
        None, gt=0, description="How long the proposals are reserved; default from settings."
    )
    wait_seconds: WaitSeconds = 0.0
    request_id: RequestId | None = None


class ProposalOut(BaseModel):
    id: str
    chain: int
    iteration: int
    kind: Literal["init", "proposal"]
    x: list[float]
    lease_expires_at: datetime


_NEXT_EXPIRY = (
    "Always present. With no proposals and the session not done: when the first running "
    "lease runs out (its proposal is handed out again then), or null if none is running; "
    "null in every other answer."
)


class AskResponse(BaseModel):
    proposals: list[ProposalOut]
    status: SessionStatus = Field(description=_SESSION_STATUS)
    done: bool
    next_lease_expires_at: datetime | None = Field(description=_NEXT_EXPIRY)


class TellResult(_Request):
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    log_density: LogDensity
    gradient: list[Any] | None = Field(
        None,
        description="Gradient of the log density at the proposal, for algorithms that use "
        "gradients (none of this version's): the others ignore it, unchecked.",
    )


class TellRequest(_Request):
    results: list[TellResult] = Field(description="Results to apply, each exactly once.")


Outcome = Literal["initialized", "outside_support", "accepted", "rejected", "duplicate"]


class TellOutcome(BaseModel):
    id: str
    chain: int
    outcome: Outcome = Field(
        description="initialized or outside_support (an initial point: outside_support "
        "either brings a new drawn initial point to the next ask, or leaves the chain "
        "needs_initial_point); accepted or rejected (a proposal); duplicate (applied "
        "before with this value: nothing changed)."
    )


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
    wait_seconds: WaitSeconds = 0.0
    request_id: RequestId | None = None


class StepResponse(BaseModel):
    results: list[TellOutcome]
    proposals: list[ProposalOut]
    status: SessionStatus = Field(description=_SESSION_STATUS)
    done: bool
    next_lease_expires_at: datetime | None = Field(description=_NEXT_EXPIRY)


class LeasesRequest(_Request):
    ids: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        min_length=1,
        max_length=MAX_COUNT,
        description="Ids of outstanding proposals (handed out, not yet told).",
    )
    lease_seconds: Annotated[float, Strict()] = Field(
        ge=0,
        description="Each lease now runs out this many seconds from now (at most the "
        "maximum lease); 0 hands the proposals back: the next ask hands them out again.",
    )


class LeaseOut(BaseModel):
    id: str
    chain: int
    lease_expires_at: datetime | None = Field(
        description="When the lease runs out now; null when handed back, or when the "
        "session is done (nothing is leased then)."
    )


class LeasesResponse(BaseModel):
    leases: list[LeaseOut] = Field(description="One per id, in request order.")
    status: SessionStatus = Field(description=_SESSION_STATUS)
    done: bool


class ResetRequest(_Request):
    initial: list[Finite] = Field(description="The chain's new initial point.")
