"""Consensus Monte Carlo: draws combined from shard sessions."""

from __future__ import annotations

from fastapi import APIRouter

from kameleon.service.deps import OwnerDep, SessionsDep
from kameleon.service.jsonio import JSON
from kameleon.service.routes import problems
from kameleon.service.schemas import ConsensusRequest, ConsensusResponse
from kameleon.service.schemas.consensus import MAX_CONSENSUS_DRAWS

router = APIRouter(tags=["draws"])


@router.post(
    "/consensus",
    name="consensus",
    response_model=ConsensusResponse,
    responses=problems(400, 404, 422),
)
async def consensus(body: ConsensusRequest, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Consensus Monte Carlo (Scott et al. 2016): each session sampled the subposterior
    of one shard of a data set, its prior raised to 1/J; their post-warm-up draws (all
    chains, as they are now) are combined into draws of the full posterior. Exact for
    Gaussian subposteriors; ``warnings`` says where a shard is not Gaussian, or warns
    itself."""
    answer = await sessions.consensus(
        owner, body.sessions, body.method, body.draws, body.seed, MAX_CONSENSUS_DRAWS
    )
    return JSON(answer)
