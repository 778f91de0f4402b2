"""The application factory."""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from kameleon.service import __version__, problems
from kameleon.service.config import Settings
from kameleon.service.core_api import DEFAULT_ALGORITHM, SAMPLERS, single_threaded_blas
from kameleon.service.limits import BodySizeLimit
from kameleon.service.observability import JsonFormatter, Metrics, RequestMetrics
from kameleon.service.option_schemas import document_options
from kameleon.service.routes import (
    consensus,
    draws,
    health,
    operation_id,
    sampling,
    sessions,
    ui,
)
from kameleon.service.sessions import SessionService
from kameleon.service.store.backends import build_store
from kameleon.service.store.base import Store

__all__ = ["build_store", "create_app"]

DESCRIPTION = """\
Kameleon runs adaptive MCMC samplers as sessions. A client anywhere asks for points,
evaluates the log density there (or the log of an unbiased estimate of it), and tells
the values back. See PROTOCOL.md for the contract.
"""


#: Allocations between two collections of the garbage collector's youngest generation
#: while the service runs (Python's default: 700).
GC_YOUNG_THRESHOLD = 50_000


def _tune_gc() -> None:
    """The garbage collector for a service: what startup allocated is frozen (never
    scanned again), and the youngest generation is collected every
    :data:`GC_YOUNG_THRESHOLD` allocations. A 256-chain step allocates tens of thousands
    of short-lived objects, almost none in cycles; with the default threshold the
    collector ran dozens of times per step and passed over the chain caches in its older
    generations: in process, 256 rwm chains per step went from 34 400 to 37 800
    evaluations/s (median of 5, both ways twice)."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def _telemetry(settings: Settings) -> dict[str, Any]:
    """FastAPI's native OpenTelemetry, on or off (:attr:`Settings.opentelemetry`), for a
    FastAPI that has it."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    on = settings.opentelemetry
    return {"telemetry": {"tracing": on, "metrics": on, "logs": on}}


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
    _configure_logging(settings)
    metrics = Metrics()
    # One BLAS thread for the whole process: the same seed and told values give the same
    # draws as in process and in every other service process (core.numerics.linalg).
    single_threaded_blas()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = store is None
        the_store = store if store is not None else build_store(settings)
        app.state.sessions = SessionService(the_store, settings)
        app.state.sessions.observe = metrics
        threshold = gc.get_threshold()
        _tune_gc()
        try:
            yield
        finally:
            await app.state.sessions.memory.close()
            gc.unfreeze()
            gc.set_threshold(*threshold)
            if own:
                await the_store.close()

    app = FastAPI(
        title="Kameleon",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        openapi_url="/v1/openapi.json",
        docs_url=None,  # served from packaged files by routes.ui
        redoc_url=None,
        strict_content_type=False,
        **_telemetry(settings),
    )
    app.state.settings = settings
    app.state.metrics = metrics
    problems.install(app)
    # The hot routes first, on the app's own router: matched before any other, with no
    # included-router layers between them and the request.
    app.router.routes[:0] = sampling.hot.routes
    app.include_router(health.router, prefix="/v1")
    app.include_router(sessions.router, prefix="/v1")
    app.include_router(sampling.router, prefix="/v1")
    app.include_router(draws.router, prefix="/v1")
    app.include_router(consensus.router, prefix="/v1")
    if settings.metrics:
        app.include_router(health.metrics_router)
    ui.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics, log_requests=settings.log_requests)
    _problem_json_errors(app)
    return app


#: The Retry-After header of the answers that carry one.
_RETRY_AFTER = {
    code: {
        "description": f"Seconds to wait before retrying (a hint; {why}).",
        "schema": {"type": "integer", "minimum": 0},
    }
    for code, why in (
        ("429", "a quota frees up when sessions are deleted or expire"),
        ("503", "the request may be retried at once after it"),
    )
}

#: (schema, property) -> the setting that bounds it.
_LIMITS = {
    ("SessionCreate", "dim"): "max_dim",
    ("SessionCreate", "chains"): "max_chains",
    ("SessionCreate", "warmup"): "max_iterations_limit",
    ("SessionCreate", "max_iterations"): "max_iterations_limit",
    ("AskRequest", "max"): "max_ask",
    ("StepRequest", "max"): "max_ask",
    ("AskRequest", "lease_seconds"): "max_lease_seconds",
    ("StepRequest", "lease_seconds"): "max_lease_seconds",
    ("AskRequest", "wait_seconds"): "max_wait_seconds",
    ("StepRequest", "wait_seconds"): "max_wait_seconds",
}


def _document_limits(spec: dict[str, Any], settings: Settings) -> None:
    """State the limits this service enforces as the schema's maxima (the committed
    openapi.yaml shows the defaults; /v1/openapi.json the running configuration)."""
    schemas = spec["components"]["schemas"]

    def bound(schema: dict[str, Any], maximum: float) -> None:
        for option in schema.get("anyOf", [schema]):
            if option.get("type") in ("integer", "number"):
                option["maximum"] = maximum

    for (name, prop), setting in _LIMITS.items():
        bound(schemas[name]["properties"][prop], getattr(settings, setting))
    draws = spec["paths"]["/v1/sessions/{session_id}/draws"]["get"]
    for parameter in draws["parameters"]:
        if parameter["name"] == "page_size":
            bound(parameter["schema"], settings.max_draws_page_size)


def _configure_logging(settings: Settings) -> None:
    """The service's loggers at ``log_level``; with ``log_format=json``, one JSON object
    a line (:class:`~kameleon.service.observability.JsonFormatter`)."""
    logger = logging.getLogger("kameleon")
    logger.setLevel(settings.log_level.upper())
    for handler in [h for h in logger.handlers if getattr(h, "_kameleon", False)]:
        logger.removeHandler(handler)
    if settings.log_format == "json" or settings.log_requests:
        handler = logging.StreamHandler()
        handler._kameleon = True  # type: ignore[attr-defined]
        if settings.log_format == "json":
            handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
        logger.propagate = False


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
                    if code in _RETRY_AFTER:
                        response["headers"] = {"Retry-After": _RETRY_AFTER[code]}
        schemas = spec["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        document_options(spec, SAMPLERS, DEFAULT_ALGORITHM)
        _document_limits(spec, app.state.settings)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
