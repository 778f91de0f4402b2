"""The application factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from service import __version__, errors
from service.config import Settings
from service.fastpath import FastPath
from service.limits import BodySizeLimit
from service.routes import draws, health, sampling, sessions
from service.sessions import SessionService
from service.store.base import Store

__all__ = ["build_store", "create_app"]

DESCRIPTION = """\
Kameleon runs adaptive MCMC samplers as sessions. A client anywhere asks for points,
evaluates the log density there (or the log of an unbiased estimate of it), and tells
the values back. See PROTOCOL.md for the contract.
"""


def build_store(settings: Settings) -> Store:
    """The store that ``settings`` names."""
    if settings.store == "redis":
        from service.store.redis_store import RedisStore

        return RedisStore.from_url(
            settings.redis_url,
            prefix=settings.redis_prefix,
            ttl_seconds=settings.session_ttl_seconds,
        )
    from service.store.memory_store import MemoryStore

    return MemoryStore()


def _operation_id(route: APIRoute) -> str:
    return route.name


def create_app(settings: Settings | None = None, store: Store | None = None) -> FastAPI:
    """Build the app.

    Parameters
    ----------
    settings
        Configuration; read from the environment when omitted.
    store
        A store to use instead of the one ``settings`` names (tests inject their own).
        The app closes only a store it built itself.
    """
    settings = settings or Settings()
    logging.getLogger("kameleon").setLevel(settings.log_level.upper())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = store is None
        the_store = store if store is not None else build_store(settings)
        app.state.sessions = SessionService(the_store, settings)
        try:
            yield
        finally:
            if own:
                await the_store.close()

    app = FastAPI(
        title="Kameleon",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        strict_content_type=False,
    )
    app.state.settings = settings
    errors.install(app)
    app.include_router(health.router, prefix="/v1")
    app.include_router(sessions.router, prefix="/v1")
    app.include_router(sampling.router, prefix="/v1")
    app.include_router(draws.router, prefix="/v1")
    app.add_middleware(FastPath)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    _problem_json_errors(app)
    return app


def _problem_json_errors(app: FastAPI) -> None:
    """Document every error answer as what it is: RFC 9457 problem+json."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = build()
        problem = {"$ref": "#/components/schemas/ProblemDetail"}
        for item in spec["paths"].values():
            for op in item.values():
                for code, response in op["responses"].items():
                    if int(code) >= 400:
                        response["content"] = {"application/problem+json": {"schema": problem}}
        schemas = spec["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
