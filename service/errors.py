"""Errors as RFC 9457 problem details, from one place.

Service code raises a :class:`Problem` subclass; :func:`install` registers the handlers
that turn those, request-validation errors, malformed JSON, unknown routes and store
outages into ``application/problem+json`` responses. Nothing else builds an error body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from service.store.base import SessionNotFound, StoreUnavailable

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "Problem",
    "ServiceUnavailable",
    "Unauthorized",
    "Unprocessable",
    "error_response",
    "install",
    "problem_response",
    "validation_response",
]

log = logging.getLogger("kameleon")
PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://kameleon.dev/problems/"


class Problem(Exception):
    """An error with an HTTP status and a problem type."""

    status = 500
    type = "internal"
    title = "Internal error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class BadRequest(Problem):
    status, type, title = 400, "malformed-request", "Malformed request"


class Unauthorized(Problem):
    status, type, title = 401, "unauthorized", "Missing or invalid API key"


class Forbidden(Problem):
    status, type, title = 403, "forbidden", "API key not accepted"


class NotFound(Problem):
    status, type, title = 404, "not-found", "Not found"


class Conflict(Problem):
    status, type, title = 409, "conflict", "Conflict"


class PayloadTooLarge(Problem):
    status, type, title = 413, "payload-too-large", "Request body too large"


class Unprocessable(Problem):
    status, type, title = 422, "invalid", "Invalid request"


class ServiceUnavailable(Problem):
    status, type, title = 503, "store-unavailable", "Store unavailable"


def problem_response(status: int, type_: str, title: str, detail: str, **extra: Any) -> Response:
    body: dict[str, Any] = {
        "type": TYPE_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update(extra)
    headers = {"Retry-After": "1"} if status == 503 else None
    try:
        content = orjson.dumps(body)
    except TypeError:  # text that is not valid Unicode (a lone surrogate) is escaped
        content = json.dumps(body, ensure_ascii=True, default=str).encode("ascii")
    return Response(content, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _from_problem(exc: Problem) -> Response:
    return problem_response(exc.status, exc.type, exc.title, exc.detail, **exc.extra)


def validation_response(errors_: Sequence[Any]) -> Response:
    """400 for a body that is not JSON, else 422 naming every invalid field."""
    errors = []
    malformed = False
    for err in errors_:
        if err.get("type") == "json_invalid":
            malformed = True
        loc = [str(part) for part in err.get("loc", ())]
        errors.append({"field": ".".join(loc), "message": str(err.get("msg", ""))})
    if malformed:
        return problem_response(400, BadRequest.type, BadRequest.title, "body is not valid JSON")
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return problem_response(422, Unprocessable.type, Unprocessable.title, detail, errors=errors)


def install(app: FastAPI) -> None:
    """Register every error handler on ``app``."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return _from_problem(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return validation_response(exc.errors())

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kinds = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}
        return problem_response(
            exc.status_code,
            kinds.get(exc.status_code, "http-error"),
            str(exc.detail) if exc.status_code != 404 else "Not found",
            str(exc.detail),
        )

    async def on_error(request: Request, exc: Exception) -> Response:
        return error_response(exc, f"{request.method} {request.url.path}")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(SessionNotFound, on_error)
    app.add_exception_handler(StoreUnavailable, on_error)
    app.add_exception_handler(Exception, on_error)


def error_response(exc: Exception, where: str) -> Response:
    """The answer to an exception raised while handling a request."""
    if isinstance(exc, Problem):
        return _from_problem(exc)
    if isinstance(exc, ValidationError):
        return validation_response(exc.errors())
    if isinstance(exc, SessionNotFound):
        return problem_response(404, NotFound.type, NotFound.title, "no such session")
    if isinstance(exc, StoreUnavailable):
        log.warning("store unavailable: %s", exc)
        return problem_response(
            503,
            ServiceUnavailable.type,
            ServiceUnavailable.title,
            "the store is unreachable; retry",
        )
    log.error("unexpected error on %s", where, exc_info=exc)
    return problem_response(500, "internal", "Internal error", "an unexpected error occurred")
