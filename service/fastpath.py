"""The hot path: ``ask``, ``tell`` and ``step`` without the framework's per-request cost.

FastAPI resolves dependencies, matches routes and re-validates for every request, which
costs several times what a one-chain ``step`` does. This plain ASGI layer recognises the
three sampling operations, validates the body in one pass (pydantic's JSON parser), and
calls the very route functions that FastAPI would call, with the same arguments; their
answers and errors are the same either way. Every other request goes to FastAPI.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from service.config import Settings
from service.deps import API_KEY_HEADER, owner_of
from service.errors import error_response, validation_response
from service.routes import sampling
from service.schemas import AskRequest, StepRequest, TellRequest
from service.sessions import SessionService

__all__ = ["FastPath"]

_PATH = re.compile(r"/v1/sessions/([^/]+)/(ask|tell|step)")
_BODIES: dict[str, type[BaseModel]] = {"ask": AskRequest, "tell": TellRequest, "step": StepRequest}
_HEADER = API_KEY_HEADER.lower().encode("latin-1")


class FastPath:
    """Serve ``POST /v1/sessions/{id}/(ask|tell|step)`` directly; pass the rest on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        session_id, operation = match.groups()
        body = await _read_body(receive)
        state = scope["app"].state
        try:
            response = await _handle(
                state.sessions, state.settings, scope, operation, session_id, body
            )
        except Exception as exc:  # the same answers as the framework's handlers give
            response = error_response(exc, f"POST {scope['path']}")
        await response(scope, receive, send)


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


def _api_key(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            return str(value.decode("latin-1"))
    return None


async def _handle(
    sessions: SessionService,
    settings: Settings,
    scope: Scope,
    operation: str,
    session_id: str,
    body: bytes,
) -> Any:
    owner = owner_of(settings, _api_key(scope))
    model = _BODIES[operation]
    if operation == "ask" and not body.strip():
        parsed: Any = AskRequest()
    else:
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as exc:
            return validation_response([dict(e, loc=("body", *e["loc"])) for e in exc.errors()])
    if operation == "ask":
        return await sampling.ask(session_id, sessions, owner, parsed)
    if operation == "tell":
        return await sampling.tell(session_id, parsed, sessions, owner)
    return await sampling.step(session_id, parsed, sessions, owner)
