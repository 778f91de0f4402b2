"""The floor: a bare ASGI app (no framework) that answers a fixed small JSON body."""

from __future__ import annotations

from typing import Any

BODY = b'{"results":[{"id":"c0.i1","chain":0,"outcome":"accepted"}],"proposals":[],"status":"sampling","done":false}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
