"""Bodies of the ask/tell loop: ask, tell, step, leases and reset."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, Strict, StringConstraints

from kameleon.service.schemas.sessions import SESSION_STATUS, SessionStatus
from kameleon.service.schemas.types import MAX_COUNT, Count, Finite, LogDensity, RequestModel

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


class AskRequest(RequestModel):
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
    kind: Literal[
        "init", "proposal", "leapfrog", "gradient_check", "minibatch", "conditional", "tempered"
    ] = Field(
        description="init: a chain's initial point; proposal: a transition's (last) "
        "point, or for `gibbs` a block's Metropolis-Hastings proposal; leapfrog, "
        "gradient_check and tempered: an evaluation within a transition that needs "
        "several (a point of a Hamiltonian trajectory; a point of the finite-difference "
        "check of the told gradients; a hot rung's proposal of `tempering`), told like "
        "any other; minibatch: `sgld`'s evaluation of a minibatch at the chain's current "
        "point; conditional: `gibbs` asks the client to draw the block `block` "
        "(coordinates `indices`) from its full conditional at `x`, the chain's current "
        "point, and to tell the draw with the log density at the point it makes."
    )
    step: int = Field(
        description="The evaluation's place in its transition (from 0); 0 for samplers "
        "that evaluate once per transition."
    )
    x: list[float]
    minibatch: list[int] | None = Field(
        None,
        description="`sgld`: the indices (from 0, sorted, without repeats) of the data "
        "points whose log likelihood is asked for, at `x`; null for the other algorithms.",
    )
    block: int | None = Field(
        None,
        description="kind conditional (`gibbs`): the block to draw, by its place in the "
        "`blocks` option (from 0); null for every other kind.",
    )
    indices: list[int] | None = Field(
        None,
        description="kind conditional (`gibbs`): the block's coordinates (from 0), in the "
        "order in which its draw is told; null for every other kind.",
    )
    lease_expires_at: datetime


_NEXT_EXPIRY = (
    "Always present. With no proposals and the session not done: when the first running "
    "lease runs out (its proposal is handed out again then), or null if none is running; "
    "null in every other answer."
)


class AskResponse(BaseModel):
    proposals: list[ProposalOut]
    status: SessionStatus = Field(description=SESSION_STATUS)
    done: bool
    next_lease_expires_at: datetime | None = Field(description=_NEXT_EXPIRY)


class TellResult(RequestModel):
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    # Absent (the default, None, never validated): only sgld goes without it; told.parse
    # tells absence from a told null (-inf) by ``model_fields_set``.
    log_density: LogDensity = Field(  # type: ignore[assignment]
        None,
        description="log density (or log of an unbiased estimate) at the proposal; "
        "-Infinity, '-inf' or null outside the support. NaN and +inf are errors. "
        "Required unless the result gives `log_prior` and `log_likelihood` (then the "
        "value is `prior_power * log_prior + log_likelihood`, which `log_density`, if "
        "given too, must equal) and by `sgld`, which ignores it: its told value is "
        "`prior_power * log_prior + (N / n) log_likelihood`.",
    )
    gradient: list[Any] | None = Field(
        None,
        description="Gradient of the log density at the point: `dim` finite numbers. "
        "Required by the algorithms that use gradients (`mala`, `hmc`, `nuts`: the "
        "session says `needs_gradient`), except where the log "
        "density is -inf; the others ignore it, unchecked. With `prior_gradient` (a "
        "result told in parts), and for `sgld`: the gradient of the log likelihood "
        "(for `sgld` the minibatch's sum over its points, not scaled).",
    )
    log_prior: LogDensity = Field(  # type: ignore[assignment]
        None,
        description="The log prior density at the point, told apart from "
        "`log_likelihood` (both, or neither; `sgld` requires them); -Infinity, '-inf' or "
        "null outside the support, where `log_likelihood` may be left out.",
    )
    log_likelihood: Finite | None = Field(
        None,
        description="The log likelihood at the point, told apart from `log_prior` (for "
        "`sgld`: the minibatch's, the sum over its data points, not scaled).",
    )
    prior_gradient: list[Any] | None = Field(
        None,
        description="The log prior's gradient at the point, `dim` finite numbers: "
        "required by `sgld`, and by a gradient algorithm told in parts when "
        "`prior_power` is not 1 (then `gradient` is the log likelihood's).",
    )
    draw: list[Any] | None = Field(
        None,
        description="For a proposal of kind conditional (`gibbs`), and required there: "
        "the block's values drawn from its full conditional, finite numbers in the order "
        "of the proposal's `indices`; `log_density` is then the log density at `x` with "
        "the block replaced by them, a finite number. Refused on every other proposal.",
    )


class TellRequest(RequestModel):
    results: list[TellResult] = Field(description="Results to apply, each exactly once.")


Outcome = Literal[
    "initialized", "outside_support", "accepted", "rejected", "step", "duplicate", "held"
]


class TellOutcome(BaseModel):
    id: str
    chain: int
    outcome: Outcome = Field(
        description="initialized or outside_support (an initial point: outside_support "
        "either brings a new drawn initial point to the next ask, or leaves the chain "
        "needs_initial_point); accepted or rejected (a proposal); step (an evaluation "
        "within a transition: the transition goes on); duplicate (applied before with "
        "this value: nothing changed); held (an evaluation of a round told before one "
        "handed out ahead of it: kept, and applied in the chain's order once those "
        "before it are told)."
    )


class TellResponse(BaseModel):
    results: list[TellOutcome]


class StepRequest(RequestModel):
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
    status: SessionStatus = Field(description=SESSION_STATUS)
    done: bool
    next_lease_expires_at: datetime | None = Field(description=_NEXT_EXPIRY)


class LeasesRequest(RequestModel):
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
    status: SessionStatus = Field(description=SESSION_STATUS)
    done: bool


class ResetRequest(RequestModel):
    initial: list[Finite] = Field(description="The chain's new initial point.")
