"""Routes of the hot path (``ask``, ``tell``, ``step``): declared like any other, run lean.

A :class:`HotRoute` is an ordinary route of the app: FastAPI reads its endpoint's
signature (the body model, the path parameter, the API key) for the OpenAPI document.
Per request, instead of FastAPI's request wrapper, dependency resolution and body
handling, which cost more than a one-chain ``step`` itself, it calls the endpoint
directly: the body is read once and validated in one pass from raw bytes by pydantic's
JSON parser (the same models declare the schema and validate), the API key is checked by
:func:`~kameleon.service.deps.owner_of`. Errors go to the app's error handlers, as from
any route.

An endpoint of a hot route takes exactly these parameters, by name: ``session_id`` (the
path parameter), ``body`` (a pydantic model; its default, if any, stands for an empty
body), ``sessions`` and ``owner`` (as :data:`~kameleon.service.deps.SessionsDep` and
:data:`~kameleon.service.deps.OwnerDep` give them).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, get_args, get_origin, get_type_hints

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kameleon.service.deps import API_KEY_HEADER, bearer_token, owner_of

__all__ = ["HotRoute"]

_HEADER = API_KEY_HEADER.lower().encode("latin-1")
_PARAMETERS = ["session_id", "sessions", "owner", "body"]


def _body_model(endpoint: Callable[..., Any]) -> tuple[type[BaseModel], Any]:
    """The endpoint's body model and its default (``inspect.Parameter.empty``: none)."""
    parameters = inspect.signature(endpoint).parameters
    if sorted(parameters) != sorted(_PARAMETERS):
        raise TypeError(f"a hot route's endpoint takes {_PARAMETERS}, not {list(parameters)}")
    hint = get_type_hints(endpoint, include_extras=True)["body"]
    model = get_args(hint)[0] if get_origin(hint) is not None else hint
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"the body of a hot route is a pydantic model, not {hint!r}")
    return model, parameters["body"].default


def _api_key(scope: Scope) -> str | None:
    """The key from ``X-API-Key``, or else from ``Authorization: Bearer``."""
    authorization = None
    for name, value in scope["headers"]:
        if name == _HEADER:
            return str(value.decode("latin-1"))
        if name == b"authorization":
            authorization = value.decode("latin-1")
    return bearer_token(authorization)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class HotRoute(APIRoute):
    """A route whose endpoint is called without FastAPI's per-request work.

    On the app's own router it is a plain ASGI app; in an included router, FastAPI calls
    :meth:`get_route_handler`'s handler, which does the same."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        self._model, self._default = _body_model(endpoint)
        super().__init__(path, endpoint, **kwargs)
        self.app = self._serve

    async def _respond(self, scope: Scope, raw: bytes) -> Response:
        state = scope["app"].state
        owner = owner_of(state.settings, _api_key(scope))
        if self._default is not inspect.Parameter.empty and not raw.strip():
            body = self._default
        else:
            try:
                body = self._model.model_validate_json(raw)
            except ValidationError as exc:
                errors = [dict(e, loc=("body", *e["loc"])) for e in exc.errors()]
                raise RequestValidationError(errors) from None
        response: Response = await self.endpoint(
            session_id=scope["path_params"]["session_id"],
            body=body,
            sessions=state.sessions,
            owner=owner,
        )
        return response

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._respond(scope, await _read_body(receive))
        await response(scope, receive, send)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        async def handler(request: Request) -> Response:
            return await self._respond(request.scope, await request.body())

        return handler
