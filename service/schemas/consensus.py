"""``POST /v1/consensus``: consensus Monte Carlo over shard sessions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from kameleon.service.schemas.types import MAX_COUNT, Count, RequestModel

#: Most shard sessions one consensus combines.
MAX_SHARDS = 256
#: Most consensus draws one answer carries.
MAX_CONSENSUS_DRAWS = 100_000


class ConsensusRequest(RequestModel):
    sessions: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        min_length=2,
        max_length=MAX_SHARDS,
        description="The shard sessions, each of which sampled the subposterior of one "
        "shard of the data (prior raised to 1/J: `prior_power`, or by the client); the "
        "caller's own, of one dim and the same param_names, no id twice.",
    )
    method: Literal["weighted", "gaussian"] = Field(
        "weighted",
        description="`weighted`: each consensus draw is the shards' draws averaged with "
        "the inverses of their sample covariances as weights (Scott et al. 2016); "
        "`gaussian`: draws from the product of the shards' Gaussian approximations. Both "
        "are exact for Gaussian subposteriors only.",
    )
    draws: Count | None = Field(
        None,
        ge=1,
        le=MAX_CONSENSUS_DRAWS,
        description="Consensus draws to return: `weighted` spreads them evenly over its "
        "own (as many as the shard with the fewest draws has); `gaussian` draws them. "
        f"Default: the fewest draws of any shard, at most {MAX_CONSENSUS_DRAWS}.",
    )
    seed: Count = Field(
        0, ge=0, le=MAX_COUNT, description="The seed of the `gaussian` rule's draws."
    )


class ConsensusShard(BaseModel):
    id: str
    draws: int = Field(description="Post-warm-up draws of the session used, all chains.")
    prior_power: float = Field(description="The session's `prior_power`.")
    warnings: list[str] = Field(description="The codes of the session's own warnings.")


class ConsensusWarning(BaseModel):
    code: Literal["shard_warnings", "non_gaussian"]
    message: str
    session: str
    parameter: str | None = None


class ConsensusResponse(BaseModel):
    method: str
    param_names: list[str]
    shards: list[ConsensusShard]
    mean: list[float] = Field(description="The combined mean.")
    sd: list[float] = Field(description="The combined standard deviations.")
    covariance: list[list[float]] = Field(description="The combined covariance.")
    draws: list[list[float]] = Field(description="Consensus draws, one row per draw.")
    warnings: list[ConsensusWarning] = Field(
        description="`shard_warnings`: a shard session's diagnostics warn (its draws may "
        "not be its subposterior's); `non_gaussian`: a shard's marginal is skewed or "
        "heavy-tailed (|skewness| > 0.5 or |excess kurtosis| > 1), where consensus is "
        "biased by an amount no diagnostic bounds."
    )
