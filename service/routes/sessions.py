"""Sessions: create, list, get, update, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from starlette.responses import Response

from kameleon.service.deps import OwnerDep, SessionsDep
from kameleon.service.jsonio import JSON
from kameleon.service.routes import problems
from kameleon.service.schemas import SessionCreate, SessionList, SessionSummary, SessionUpdate

router = APIRouter(prefix="/sessions", tags=["sessions"])


@router.post(
    "",
    name="create_session",
    status_code=201,
    response_model=SessionSummary,
    responses=problems(400, 422, 429),
)
async def create_session(
    body: SessionCreate,
    sessions: SessionsDep,
    owner: OwnerDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            pattern=r"^[!-~]{1,128}$",
            description="Makes the create safe to retry (1 to 128 printable ASCII "
            "characters, no spaces): a create with a key this caller used before, while "
            "the session it made lives, makes nothing and answers that session (201). "
            "Use a new key per session, the same one for its retries.",
        ),
    ] = None,
) -> JSON:
    """Create a session. Every chain's first proposal is its initial point: without
    ``initial``, a point drawn uniformly from (-2, 2) per coordinate, its own for each
    chain; with ``initial``, that point (or one drawn from ``initial ± initial_radius``).
    A drawn initial point told outside the support is replaced by the chain's next draw
    (a new ``init`` proposal with a new id), up to ``max_initial_attempts`` points; a
    given one, or the last draw, leaves the chain ``needs_initial_point`` until a reset
    gives it a new one."""
    summary = await sessions.create(body, owner, idempotency_key)
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
    """Summary: options as resolved, status and why it is done (`stopped_by`),
    iterations, evaluations and acceptance per chain, and the warnings of the latest
    diagnostics (never computed here, so a summary stays cheap)."""
    return JSON(await sessions.summary(session_id, owner))


@router.patch(
    "/{session_id}",
    name="update_session",
    response_model=SessionSummary,
    responses=problems(400, 404, 409, 422, 429),
)
async def update_session(
    session_id: str, body: SessionUpdate, sessions: SessionsDep, owner: OwnerDep
) -> JSON:
    """Give the session a later ``max_iterations`` or another stopping rule; the fields
    left out stay as they are. A session that was done (every chain at
    ``max_iterations``, or its stopping rule met) goes on: ask hands out proposals again,
    from where each chain stopped, with its adaptation as it was. The draws up to the new
    end are reserved against the quotas (429 over them). A session whose sampler failed
    cannot go on (409). Safe to retry."""
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    return JSON(await sessions.update(session_id, owner, changes))


@router.delete("/{session_id}", name="delete_session", status_code=204, responses=problems(404))
async def delete_session(session_id: str, sessions: SessionsDep, owner: OwnerDep) -> Response:
    """Delete the session and its draws. Safe to retry: deleting a session this caller
    deleted before answers 204 again (for as long as the session would have lived)."""
    await sessions.delete(session_id, owner)
    return Response(status_code=204)
