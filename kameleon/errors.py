"""The service's errors as Python exceptions.

Every error the service answers is RFC 9457 ``application/problem+json``; the clients
raise it as the :class:`KameleonError` subclass of its status, with the problem's fields
as attributes. An answer that is not problem+json (a proxy's error page) still becomes a
:class:`KameleonError` of its status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Invalid",
    "KameleonError",
    "NotFound",
    "PayloadTooLarge",
    "Unauthorized",
    "Unavailable",
    "error_from_response",
]


class KameleonError(Exception):
    """An error answer of the service.

    Attributes
    ----------
    status
        The HTTP status.
    type, title, detail
        The problem's fields (RFC 9457).
    errors
        The problem's ``errors``: one mapping per offending field or id, each with a
        ``message``; empty when it has none.
    body
        The whole problem body (or ``{}`` for an answer that was not JSON).
    """

    status: int = 0

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        type: str = "about:blank",
        title: str = "",
        errors: list[dict[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        if status is not None:
            self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors = list(errors or [])
        self.body: dict[str, Any] = dict(body or {})

    def __str__(self) -> str:
        where = "; ".join(
            text
            for e in self.errors
            if (e.get("field") or e.get("id"))
            and (text := f"{e.get('field') or e.get('id')}: {e.get('message')}") not in self.detail
        )
        head = f"{self.status} {self.title}: {self.detail}" if self.title else self.detail
        return f"{head} ({where})" if where else head


class BadRequest(KameleonError):
    """400: the body is not valid JSON."""

    status = 400


class Unauthorized(KameleonError):
    """401: a missing or unknown API key (and 403, :class:`Forbidden`)."""

    status = 401


class Forbidden(Unauthorized):
    """403: the API key is not accepted."""

    status = 403


class NotFound(KameleonError):
    """404: no such session (or one that belongs to another key), chain or route."""

    status = 404


class Conflict(KameleonError):
    """409: proposal ids that are not outstanding, or a conflicting reset.

    Attributes
    ----------
    ids
        The offending proposal ids: drop them and resend the rest.
    results
        Outcomes of results that were applied before the conflict was found (each a
        mapping with ``id``, ``chain``, ``outcome``); usually empty, as a 409 applies
        nothing.
    """

    status = 409

    def __init__(self, detail: str, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.ids: list[str] = [str(i) for i in self.body.get("ids") or []]
        self.results: list[dict[str, Any]] = list(self.body.get("results") or [])


class PayloadTooLarge(KameleonError):
    """413: the body is over the service's limit."""

    status = 413


class Invalid(KameleonError):
    """422: well-formed but invalid (NaN, a wrong dimension, an unknown option...)."""

    status = 422


class Unavailable(KameleonError):
    """503: the store did not answer (problem type ``store-unavailable``) or the
    service was too busy (``service-busy``); the request changed nothing and may be
    retried."""

    status = 503


_BY_STATUS: dict[int, type[KameleonError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        PayloadTooLarge,
        Invalid,
        Unavailable,
    )
}


def error_from_response(response: httpx.Response) -> KameleonError:
    """The exception for an error answer (status 400 or over)."""
    status = response.status_code
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(response.content) if response.content else {}
    except ValueError:
        parsed = {}
    if isinstance(parsed, dict):
        body = parsed
    detail = body.get("detail")
    if not isinstance(detail, str):
        detail = response.reason_phrase or f"HTTP {status}"
        text = response.text.strip() if not body else ""
        if text:
            detail = f"{detail}: {text[:200]}"
    errors = body.get("errors")
    cls = _BY_STATUS.get(status, KameleonError)
    return cls(
        detail,
        status=status,
        type=str(body.get("type", "about:blank")),
        title=str(body.get("title", response.reason_phrase or "")),
        errors=errors if isinstance(errors, list) else None,
        body=body,
    )
