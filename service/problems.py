"""Errors as RFC 9457 problem details, from one place: the HTTP edge.

The use cases raise their own errors (``sessions.errors``), the store its own
(``store.base``), the routes a :class:`Problem` subclass; :func:`error_response` is the
one mapper that turns those, request-validation errors, malformed JSON, unknown routes and
bodies over the limit into ``application/problem+json`` responses, and :func:`install`
makes it the app's handler of every exception. Nothing else builds an error body.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from kameleon.service.sessions import errors as domain
from kameleon.service.store.records import SessionNotFound, StoreBusy, StoreUnavailable

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "Problem",
    "SamplerFailed",
    "ServiceBusy",
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


class TooMany(Problem):
    status, type, title = 429, "quota-exceeded", "Quota exceeded"


class SamplerFailed(Problem):
    status, type, title = 422, "sampler-failed", "The sampler failed"


class ServiceUnavailable(Problem):
    status, type, title = 503, "store-unavailable", "Store unavailable"


class ServiceBusy(Problem):
    """503 because this service process (or the chains asked about) had more work at
    once than it could finish in time; the store may be fine."""

    status, type, title = 503, "service-busy", "Service busy"


#: The ``Retry-After`` (seconds) of every 503.
RETRY_AFTER_SECONDS = 1
#: The ``Retry-After`` (seconds) of every 429: a quota frees up when sessions are
#: deleted or expire, so a client that cannot delete any waits longer than for a 503.
QUOTA_RETRY_AFTER_SECONDS = 30


def problem_response(status: int, type_: str, title: str, detail: str, **extra: Any) -> Response:
    body: dict[str, Any] = {
        "type": TYPE_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update(extra)
    if "errors" not in body:
        # One shape for every error: ``errors`` names each offending field or id (none,
        # when the request as a whole is refused).
        if "ids" in body:
            body["errors"] = [{"id": str(i), "message": detail} for i in body["ids"]]
        elif "field" in body:
            body["errors"] = [{"field": str(body["field"]), "message": detail}]
        else:
            body["errors"] = []
    headers = None
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    elif status == 429:
        headers = {"Retry-After": str(QUOTA_RETRY_AFTER_SECONDS)}
    try:
        content = orjson.dumps(body)
    except TypeError:  # text that is not valid Unicode (a lone surrogate) is escaped
        content = json.dumps(body, ensure_ascii=True, default=str).encode("ascii")
    return Response(content, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _from_problem(exc: Problem) -> Response:
    return problem_response(exc.status, exc.type, exc.title, exc.detail, **exc.extra)


def field_path(loc: Sequence[Any]) -> str:
    """One style for every ``field``: a body field as its dotted path from the body
    (``results.0.log_density``), a query parameter, path parameter or header by its
    name (``page_size``, ``idempotency-key``), as the service's own checks name them."""
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def validation_response(errors_: Sequence[Any]) -> Response:
    """400 for a body that is not JSON, else 422 naming every invalid field."""
    errors = []
    malformed = False
    for err in errors_:
        if err.get("type") == "json_invalid":
            malformed = True
        errors.append({"field": field_path(err.get("loc", ())), "message": str(err.get("msg", ""))})
    if malformed:
        return problem_response(400, BadRequest.type, BadRequest.title, "body is not valid JSON")
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return problem_response(422, Unprocessable.type, Unprocessable.title, detail, errors=errors)


def install(app: FastAPI) -> None:
    """Answer every exception with :func:`error_response` (the one error mapper)."""

    async def on_error(request: Request, exc: Exception) -> Response:
        response = error_response(exc, f"{request.method} {request.url.path}")
        if isinstance(exc, StoreUnavailable):
            metrics = getattr(request.app.state, "metrics", None)
            if metrics is not None:
                metrics.count_store_failure(busy=isinstance(exc, StoreBusy))
        if response.status_code == 405:
            response.headers["Allow"] = ", ".join(_allowed(request))
        return response

    for kind in (
        Problem,
        domain.ServiceError,
        RequestValidationError,
        StarletteHTTPException,
        SessionNotFound,
        StoreUnavailable,
        Exception,
    ):
        app.add_exception_handler(kind, on_error)


class _Incidents:
    """Logs an unreachable store (or a busy process) once per incident, not once per
    request: the first failure, then at most one line every ``every`` seconds, with how
    many requests failed since."""

    def __init__(self, what: str, every: float = 10.0) -> None:
        self.what = what
        self.every = every
        self.last = -math.inf
        self.quiet = 0

    def report(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.quiet += 1
            return
        more = f" ({self.quiet} more requests failed since the last report)" if self.quiet else ""
        log.warning("%s: %s%s", self.what, exc, more)
        self.last, self.quiet = now, 0


_STORE_LOG = _Incidents("store unavailable")
_BUSY_LOG = _Incidents("service busy")

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> list[str]:
    """The methods some route answers at the request's path (the router names only the
    first route it matched in part)."""
    routes: list[BaseRoute] = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    ]


_DOMAIN: dict[type[domain.ServiceError], type[Problem]] = {
    domain.NotFound: NotFound,
    domain.Invalid: Unprocessable,
    domain.Conflict: Conflict,
    domain.Busy: ServiceBusy,
    domain.Quota: TooMany,
    domain.SamplerFailed: SamplerFailed,
}
_HTTP_KINDS = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}
_HTTP_TITLES = {404: "Not found", 413: PayloadTooLarge.title}


def error_response(exc: Exception, where: str) -> Response:
    """The answer to an exception raised while handling a request."""
    if isinstance(exc, Problem):
        return _from_problem(exc)
    if isinstance(exc, domain.ServiceError):
        kind = _DOMAIN[type(exc)]
        return problem_response(kind.status, kind.type, kind.title, exc.detail, **exc.extra)
    if isinstance(exc, RequestValidationError | ValidationError):
        return validation_response(exc.errors())
    if isinstance(exc, StarletteHTTPException):
        code = exc.status_code
        response = problem_response(
            code,
            _HTTP_KINDS.get(code, "http-error"),
            _HTTP_TITLES.get(code, str(exc.detail)),
            str(exc.detail),
        )
        for name, value in (exc.headers or {}).items():  # 405's Allow, for one
            response.headers[name] = value
        return response
    if isinstance(exc, SessionNotFound):
        return problem_response(404, NotFound.type, NotFound.title, "no such session")
    if isinstance(exc, StoreBusy):
        _BUSY_LOG.report(exc)
        return problem_response(
            503,
            ServiceBusy.type,
            ServiceBusy.title,
            "the service is too busy to finish this request in time (the store answers "
            "other requests); nothing changed, retry",
        )
    if isinstance(exc, StoreUnavailable):
        _STORE_LOG.report(exc)
        return problem_response(
            503,
            ServiceUnavailable.type,
            ServiceUnavailable.title,
            "the store is unreachable; retry",
        )
    log.error("unexpected error on %s", where, exc_info=exc)
    return problem_response(500, "internal", "Internal error", "an unexpected error occurred")
