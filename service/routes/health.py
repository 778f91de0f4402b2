"""``GET /v1/health``: liveness and the store's readiness."""

from __future__ import annotations

from fastapi import APIRouter

from kameleon.service import __version__
from kameleon.service.deps import SessionsDep
from kameleon.service.jsonio import JSON
from kameleon.service.schemas import Health

router = APIRouter(tags=["health"])


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
