"""What the service reports, as pydantic models: draws, diagnostics and their warnings,
health, and problem details (the error body). The request and session models are in
:mod:`kameleon.service.schemas`, which re-exports these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kameleon.core.checks import CODES

__all__ = [
    "ChainDiagnostics",
    "Diagnostics",
    "DrawsChain",
    "DrawsPage",
    "Health",
    "ParameterDiagnostics",
    "ProblemDetail",
    "ProblemError",
    "WarningCode",
    "WarningOut",
]

WarningCode = Literal[CODES]  # type: ignore[valid-type]


class WarningOut(BaseModel):
    """A convergence problem, computed on the post-warm-up draws (chains cut to a common
    length) and each chain's post-warm-up acceptance rate. Codes:

    - `too_few_draws`: fewer than 4 post-warm-up draws per chain, R-hat and ESS
      undefined; nothing else is judged. `value`: draws per chain.
    - `nonfinite`: a parameter has NaN or infinite draws. `value`: how many.
    - `improper`: the chains drift without settling, as on a target that is not
      normalisable (a flat or unbounded log density, e.g. a missing prior): some R-hat
      is over 1.01 and a parameter whose R-hat warns reaches `threshold` (1e15) in
      magnitude, or every chain's log density keeps rising after warm-up, or never
      changes while the chain accepts over 95% of its proposals. One for the session
      (`value`: the largest magnitude a draw reached, `parameter`: whose); the `rhat`,
      `ess_*`, `acceptance_*`, `stuck` and `chain_mean` warnings it stands for are
      then not reported.
    - `rhat`: a parameter's rank-normalised split R-hat is over 1.01: the chains do
      not agree yet. `value` null: chains stuck at different points.
    - `ess_bulk`, `ess_tail`: a parameter's bulk or tail ESS is under 100 per chain
      (`threshold`: 100 times the chains).
    - `acceptance_low`, `acceptance_high`: a chain accepted under 5% or over 95% of its
      proposals after warm-up.
    - `stuck`: a chain's longest run of identical consecutive draws is longer than
      `threshold`, the run a chain accepting 5% of its proposals exceeds with
      probability under 1% (225 for 1000 draws, 315 for 100 000). `value`: the run.
    - `chain_mean`: a chain's mean of `parameter` (rank-normalised) lies more than 5
      Monte Carlo standard errors from the other chains' (`value`, signed); judged
      only where the bulk ESS does not warn, one per chain for its worst parameter.
    """

    code: WarningCode = Field(description="Stable code of the problem; see above.")
    parameter: str | None = Field(description="The parameter concerned, or null.")
    chain: int | None = Field(description="The chain concerned, or null.")
    value: float | None = Field(description="The number measured; null when infinite.")
    threshold: float = Field(description="The bound it crossed.")
    message: str = Field(description="The same, for a person.")


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
    draws: int = Field(
        description="Post-warm-up draws per chain used: the chains cut to a common length."
    )
    parameters: list[ParameterDiagnostics]
    chains: list[ChainDiagnostics]
    warnings: list[WarningOut] = Field(
        description="Convergence problems found; empty when there is none."
    )


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    store: str
    store_ready: bool | None = Field(
        description="Null from the liveness probe, which never asks the store."
    )
    version: str


class ProblemError(BaseModel):
    """One offending field (dotted path into the body or a query parameter) or id."""

    field: str | None = None
    id: str | None = None
    message: str


class ProblemDetail(BaseModel):
    """RFC 9457 problem details. ``errors`` names every offending field or proposal id
    (for a 409, ``ids`` lists the ids too: drop them and resend the rest)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[ProblemError] | None = None
    ids: list[str] | None = None
    field: str | None = None
