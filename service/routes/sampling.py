"""The ask/tell loop: ask, tell, step, leases renewed or handed back, and a new initial
point for a chain.

``ask``, ``tell`` and ``step`` are hot routes (:mod:`kameleon.service.routes.hot`): declared
like any route, handled without FastAPI's per-request work.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path

from kameleon.service.deps import OwnerDep, SessionsDep
from kameleon.service.jsonio import JSON
from kameleon.service.routes import operation_id, problems
from kameleon.service.routes.hot import HotRoute
from kameleon.service.schemas import (
    AskRequest,
    AskResponse,
    ChainSummary,
    LeasesRequest,
    LeasesResponse,
    ResetRequest,
    StepRequest,
    StepResponse,
    TellRequest,
    TellResponse,
)

router = APIRouter(prefix="/sessions/{session_id}", tags=["sampling"])
#: The hot routes, with their full paths: the app puts them first on its own router
#: (an included router's routes cost a walk through its layers on every request).
hot = APIRouter(
    prefix="/v1/sessions/{session_id}",
    tags=["sampling"],
    route_class=HotRoute,
    generate_unique_id_function=operation_id,
)


@hot.post("/ask", name="ask", response_model=AskResponse, responses=problems(400, 404, 422))
async def ask(
    session_id: str,
    sessions: SessionsDep,
    owner: OwnerDep,
    body: Annotated[AskRequest, Body()] = AskRequest(),  # noqa: B008
) -> JSON:
    """Up to ``max`` proposals from chains that have no live lease, each leased for
    ``lease_seconds``. A proposal whose lease ran out is handed out again: same id, same
    point. A session that is done (every chain at ``max_iterations``, or its stopping
    rule met) hands out none and answers ``done: true``. With nothing to hand out, the
    request waits up to ``wait_seconds`` for a proposal to free up (long poll), and an
    empty answer says when the next lease runs out. A retry with the same ``request_id``
    gets the same proposals back while their lease runs."""
    return JSON(
        await sessions.ask(
            session_id,
            owner,
            body.max,
            body.lease_seconds,
            wait=body.wait_seconds,
            request=body.request_id,
        )
    )


@hot.post("/tell", name="tell", response_model=TellResponse, responses=problems(400, 404, 409, 422))
async def tell(session_id: str, body: TellRequest, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Results for proposals, each applied exactly once; the answers come in request
    order, each naming its id and chain. A retried result with the same value answers
    ``duplicate``; a different value for an applied id is 409. A result for a round's
    evaluation told ahead of its turn answers ``held`` and is applied in the chain's
    order. One invalid result fails the whole request with 422 before anything is
    applied."""
    return JSON(await sessions.tell(session_id, owner, body.results))


@hot.post("/step", name="step", response_model=StepResponse, responses=problems(400, 404, 409, 422))
async def step(session_id: str, body: StepRequest, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Tell, then ask, in one round trip: the fast path of the loop. ``wait_seconds``
    and ``request_id`` work as for ``ask``; the results of a retried step answer
    ``duplicate``."""
    return JSON(
        await sessions.step(
            session_id,
            owner,
            body.results,
            body.max,
            body.lease_seconds,
            wait=body.wait_seconds,
            request=body.request_id,
        )
    )


@router.post(
    "/leases",
    name="set_leases",
    response_model=LeasesResponse,
    responses=problems(400, 404, 409, 422),
)
async def set_leases(
    session_id: str, body: LeasesRequest, sessions: SessionsDep, owner: OwnerDep
) -> JSON:
    """Renew the leases of outstanding proposals (``lease_seconds`` > 0: each now runs
    out that many seconds from now), or hand them back (0: the next ask hands them out
    again, same ids and points). For a worker whose evaluation takes longer than its
    lease, or that stops before it can tell. An id that is not outstanding (told
    already, never issued, obsolete) refuses the whole request with 409 and changes
    nothing."""
    return JSON(await sessions.set_leases(session_id, owner, body.ids, body.lease_seconds))


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
    support (status ``needs_initial_point``), a new initial point. The ids of its earlier
    initial points become obsolete (409). A point given here is used exactly: if it is
    outside the support too, the chain waits for another reset."""
    return JSON(await sessions.reset_chain(session_id, owner, chain, body.initial))
