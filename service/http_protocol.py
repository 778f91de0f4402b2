"""The HTTP protocol ``kameleon serve`` runs: uvicorn's (httptools), with a read timeout.

uvicorn closes a connection idle between requests (``timeout_keep_alive``), but waits
for ever for a request's headers and body: a client that sends a byte a second (or
opens a connection and sends nothing) holds a connection, and a few thousand such hold
the process, when the service is exposed without a proxy in front. Here a request must
arrive whole, headers and body, within ``request_read_timeout_seconds`` of the
connection opening or of its first byte; else a request whose headers never completed
is answered 408 and the connection closed, and one whose body stalled is closed (the
app sees the client go away, and nothing was applied).
"""

from __future__ import annotations

import asyncio
import functools

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kameleon.service.config import Settings

__all__ = ["ReadTimeoutProtocol"]

_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 32\r\nconnection: close\r\n\r\nthe request did not arrive whole"
)


@functools.cache
def _read_timeout() -> float:
    """The setting, read once per process (every worker reads the same environment)."""
    return Settings().request_read_timeout_seconds


class ReadTimeoutProtocol(HttpToolsProtocol):
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self) -> None:
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(_read_timeout(), self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_REQUEST_TIMEOUT)  # its headers never completed
        self.transport.close()
