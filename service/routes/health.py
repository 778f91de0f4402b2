"""Health: ``/v1/health/live`` for a liveness probe (the process answers; it never
touches the store), ``/v1/health/ready`` for a readiness probe (the store answers within
a short time), and ``/v1/health``, both in one answer."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from kameleon.service import __version__
from kameleon.service.deps import OwnerDep, SessionsDep
from kameleon.service.jsonio import JSON
from kameleon.service.schemas import Health

router = APIRouter(tags=["health"])
#: ``GET /metrics`` (``metrics`` setting), outside ``/v1`` where scrapers look for it.
metrics_router = APIRouter(tags=["health"])


@router.get(
    "/health",
    response_model=Health,
    name="health",
    responses={503: {"model": Health, "description": "The store is not ready."}},
)
async def health(sessions: SessionsDep) -> JSON:
    """Answers 200 when the service and its store are ready, 503 when the store is not."""
    ready = await sessions.store_ready()
    body = Health(
        status="ok" if ready else "unavailable",
        store=sessions.store.name,
        store_ready=ready,
        version=__version__,
    )
    return JSON(body.model_dump(), status_code=200 if ready else 503)


@router.get("/health/live", response_model=Health, name="health_live")
async def live(sessions: SessionsDep) -> JSON:
    """Answers 200 while the process serves requests; never asks the store, so a store
    outage does not make an orchestrator restart healthy service processes."""
    body = Health(status="ok", store=sessions.store.name, store_ready=None, version=__version__)
    return JSON(body.model_dump())


@router.get(
    "/health/ready",
    response_model=Health,
    name="health_ready",
    responses={503: {"model": Health, "description": "The store is not ready."}},
)
async def ready(sessions: SessionsDep) -> JSON:
    """200 when the store answers within 2 s, else 503: take the process out of a load
    balancer's rotation until it does."""
    return await health(sessions)


@metrics_router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, owner: OwnerDep) -> Response:
    """Prometheus metrics of this process (text exposition format); needs an API key
    when keys are configured."""
    del owner  # checked by the dependency
    from kameleon.service.observability import CONTENT_TYPE_LATEST

    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
