"""Sessions: create, list, get, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from service.deps import OwnerDep, SessionsDep
from service.jsonio import JSON
from service.routes import problems
from service.schemas import SessionCreate, SessionList, SessionSummary

router = APIRouter(prefix="/sessions", tags=["sessions"])


@router.post(
    "",
    name="create_session",
    status_code=201,
    response_model=SessionSummary,
    responses=problems(400, 422),
)
async def create_session(body: SessionCreate, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Create a session. Every chain's first proposal is its initial point."""
    summary = await sessions.create(body, owner)
    return JSON(summary, status_code=201, headers={"Location": f"/v1/sessions/{summary['id']}"})


@router.get("", name="list_sessions", response_model=SessionList, responses=problems(422))
async def list_sessions(
    sessions: SessionsDep,
    owner: OwnerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JSON:
    """The caller's sessions, oldest first; pass ``next`` back as ``cursor`` for more."""
    return JSON(await sessions.list_sessions(owner, cursor, limit))


@router.get(
    "/{session_id}", name="get_session", response_model=SessionSummary, responses=problems(404)
)
async def get_session(session_id: str, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Summary: options as resolved, status, iterations, evaluations and acceptance per chain."""
    return JSON(await sessions.summary(session_id, owner))


@router.delete("/{session_id}", name="delete_session", status_code=204, responses=problems(404))
async def delete_session(session_id: str, sessions: SessionsDep, owner: OwnerDep) -> Response:
    """Delete the session and its draws."""
    await sessions.delete(session_id, owner)
    return Response(status_code=204)
