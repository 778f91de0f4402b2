"""Bodies of the session endpoints: create, update, summary, list."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from kameleon.service.core_api import (
    CHAINS,
    DEFAULT_ALGORITHM,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RADIUS,
    ITERATIONS,
    SAMPLERS,
    WARMUP,
)
from kameleon.service.reports import WarningOut
from kameleon.service.schemas.types import (
    ALGORITHMS,
    MAX_COUNT,
    MAX_INITIAL_ATTEMPTS,
    Count,
    Finite,
    Name,
    RequestModel,
    one_row,
)

# ------------------------------------------------------------------------- sessions


class StopRuleIn(RequestModel):
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


class SessionCreate(RequestModel):
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
        BeforeValidator(one_row, json_schema_input_type=list[list[float]] | list[float] | None),
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
    prior_power: Finite = Field(
        1.0,
        gt=0,
        le=1,
        description="When a result tells `log_prior` and `log_likelihood` apart, its value "
        "is `prior_power * log_prior + log_likelihood`: a shard of J for consensus Monte "
        "Carlo gives 1/J. Results told as `log_density` alone are used as told.",
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


class SessionUpdate(RequestModel):
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
SESSION_STATUS = (
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
    prior_power: float = Field(
        description="The power of `log_prior` in a result told in parts (1: the posterior)."
    )
    needs_gradient: bool = Field(
        description="Whether every result must carry `gradient` (the algorithms that use "
        "gradients): a worker joining a session reads it here."
    )
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
    status: SessionStatus = Field(description=SESSION_STATUS)
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
