"""The ask/tell loop: ask, tell, step, and a new initial point for a chain."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path

from service.deps import OwnerDep, SessionsDep
from service.jsonio import JSON
from service.routes import problems
from service.schemas import (
    AskRequest,
    AskResponse,
    ChainSummary,
    ResetRequest,
    StepRequest,
    StepResponse,
    TellRequest,
    TellResponse,
)

router = APIRouter(prefix="/sessions/{session_id}", tags=["sampling"])


@router.post("/ask", name="ask", response_model=AskResponse, responses=problems(400, 404, 422))
async def ask(
    session_id: str,
    sessions: SessionsDep,
    owner: OwnerDep,
    body: Annotated[AskRequest, Body()] = AskRequest(),  # noqa: B008
) -> JSON:
    """Up to ``max`` proposals from chains that have no live lease, each leased for
    ``lease_seconds``. A proposal whose lease ran out is handed out again: same id, same
    point."""
    return JSON(await sessions.ask(session_id, owner, body.max, body.lease_seconds))


@router.post(
    "/tell", name="tell", response_model=TellResponse, responses=problems(400, 404, 409, 422)
)
async def tell(session_id: str, body: TellRequest, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Results for proposals, each applied exactly once. A retried result with the same
    value answers ``duplicate``; a different value for an applied id is 409. One invalid
    result fails the whole request with 422 before anything is applied."""
    return JSON(await sessions.tell(session_id, owner, body.results))


@router.post(
    "/step", name="step", response_model=StepResponse, responses=problems(400, 404, 409, 422)
)
async def step(session_id: str, body: StepRequest, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Tell, then ask, in one round trip: the fast path of the loop."""
    return JSON(await sessions.step(session_id, owner, body.results, body.max, body.lease_seconds))


@router.post(
    "/chains/{chain}/reset",
    name="reset_chain",
    response_model=ChainSummary,
    responses=problems(400, 404, 409, 422),
)
async def reset_chain(
    session_id: str,
    chain: Annotated[int, Path(ge=0)],
    body: ResetRequest,
    sessions: SessionsDep,
    owner: OwnerDep,
) -> JSON:
    """Give a chain whose initial point is still to be evaluated, or was outside the
    support, a new initial point. Its previous initial proposal becomes obsolete (409)."""
    return JSON(await sessions.reset_chain(session_id, owner, chain, body.initial))
