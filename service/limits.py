"""A bound on request bodies, as plain ASGI middleware (cheap on the hot path); and the
one Content-Type rule: every body is read as JSON.

The body is not buffered here: the app reads it once, through a ``receive`` that counts
the bytes and raises :class:`BodyTooLarge` as soon as they pass the limit, which the
error handlers answer with 413. A declared ``Content-Length`` over the limit is answered
before the app runs.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kameleon.service.problems import problem_response

__all__ = ["BodySizeLimit", "BodyTooLarge"]


class BodyTooLarge(HTTPException):
    """The body read so far is over the limit.

    An ``HTTPException``, so that the framework's body parsing passes it on unchanged
    (it turns other exceptions raised while reading into 400)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the body is over the limit of {max_bytes} bytes")


def _json_type(value: bytes) -> bool:
    kind = value.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or kind.endswith(b"+json")


class BodySizeLimit:
    """Answer 413 to a request whose body is over ``max_bytes`` (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", ())
        for index, (name, value) in enumerate(headers):
            if name == b"content-type" and not _json_type(value):
                # One rule for every endpoint: a body is read as JSON, whatever its
                # Content-Type says (clients in other languages often send none, or
                # their library's default, and the body is JSON all the same).
                scope = dict(scope)
                scope["headers"] = [
                    *headers[:index],
                    (name, b"application/json"),
                    *headers[index + 1 :],
                ]
                headers = scope["headers"]
                break
        for name, value in headers:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await problem_response(
                        413,
                        "payload-too-large",
                        "Request body too large",
                        BodyTooLarge(self.max_bytes).detail,
                    )(scope, receive, send)
                    return
                break
        limit, seen = self.max_bytes, 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, bounded, send)
