"""A bound on request bodies, as plain ASGI middleware (cheap on the hot path)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import problem_response

__all__ = ["BodySizeLimit"]


def _replay(bodies: list[bytes], last: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that yields the buffered body once, then defers to the real one."""
    pending: list[Message] = [
        {"type": "http.request", "body": b, "more_body": False} for b in bodies
    ]
    if last is not None:
        pending.append(last)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


class BodySizeLimit:
    """Answer 413 to a request whose body is over ``max_bytes`` (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send)
                    return
        # Read the whole (bounded) body first, then replay it: a request over the limit
        # never reaches the app, whatever its framing.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._reject(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        await self.app(scope, _replay([body], None, receive), send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413,
            "payload-too-large",
            "Request body too large",
            f"the body is over the limit of {self.max_bytes} bytes",
        )
        await response(scope, receive, send)
