"""HTTP routes: parse, call :mod:`service.sessions`, serialise. Nothing else."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from kameleon.service.schemas import ProblemDetail

_MEANING = {
    400: "Malformed JSON.",
    401: "Missing API key (when keys are configured).",
    403: "API key not accepted.",
    404: "No such session (or it belongs to another key).",
    409: "A proposal id that is not outstanding, or a conflicting reset.",
    413: "Body over the configured limit.",
    422: "Well-formed but invalid (also: a session over the memory budget, with its "
    "estimated `bytes` and the `limit`; or `sampler-failed`: the sampler failed on a "
    'chain, the session is stopped, `stopped_by: "sampler_error"`).',
    429: "The key's quota of sessions or memory is used up (`limit`); delete sessions to "
    "make room.",
    503: "Nothing changed; retry after `Retry-After` seconds. Problem type `store-unavailable`: "
    "the store did not answer within its timeout; `service-busy`: the service is too busy "
    "(every store connection of the process in use, a write the store ran too late, or "
    "too much contention on the same chains).",
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers of a route (problem+json bodies)."""
    return {
        code: {
            "model": ProblemDetail,
            "description": _MEANING[code],
            "content": {"application/problem+json": {}},
        }
        for code in sorted({*codes, 401, 403, 413, 503})
    }


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI ``operationId``: its name."""
    return route.name
