"""An HTTP proxy in front of the service that injects the faults a client must survive.

The proxy numbers the ``step`` requests it receives (1, 2, ...) and, at fixed numbers:

* ``unavailable``: answers 503 without forwarding (the store was unreachable);
* ``refused``: closes the connection without forwarding (the request never arrived), and
  does the same to the next request with the same body (libcurl silently retries once
  on a fresh connection when a reused one closes; the second refusal reaches the client);
* ``lost``: forwards, then closes the connection without answering (the results were
  applied but the answer is lost: the retry must be answered ``duplicate``);
* ``rival`` (once, at the first request from that number on that is not a retry and
  has a finite result): first tells that result itself, with a value 1e-9 off, as a
  worker whose lease had run out would have, then forwards: the service answers 409
  naming that id, and the client must drop it and send the rest.

It also counts the results told as ``null`` (the log density was -inf) and remembers
every id told, so that a test can check that refused and lost results were retried and
that a conflicting one was not.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["Faults", "FaultyProxy", "faulty_proxy"]

_FORWARDED_HEADERS = ("content-type", "retry-after", "link")


@dataclass
class Faults:
    """Which ``step`` requests (1-based) get which fault, and what happened."""

    unavailable: frozenset[int] = frozenset({3, 17})
    refused: frozenset[int] = frozenset({13})
    lost: frozenset[int] = frozenset({7})
    rival: int = 11
    # Observed:
    steps: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    nulls: int = 0
    told: Counter[str] = field(default_factory=Counter)  # id -> requests that carried it
    retry_expected: set[str] = field(default_factory=set)  # ids of refused/lost requests
    rival_ids: set[str] = field(default_factory=set)
    refuse_again: set[bytes] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # the proxy's own failures


class FaultyProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, faults: Faults) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.faults = faults
        self.lock = threading.Lock()
        # One pool of connections to the service for all the handler threads (one per
        # client connection: the bash client opens one per request).
        self.upstream_client = httpx.Client(base_url=upstream, timeout=60)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def client(self) -> httpx.Client:
        """The connections to the service."""
        return self.upstream_client

    def decide(self, path: str, body: bytes) -> str | None:
        """Record a request; the fault to inject, if any."""
        if not path.endswith(("/step", "/tell")):
            return None
        results: list[dict[str, Any]] = json.loads(body).get("results", [])
        ids = [r["id"] for r in results]
        with self.lock:
            f = self.faults
            fresh = not any(f.told[i] for i in ids)  # not a retry
            f.told.update(ids)
            f.nulls += sum(r.get("log_density") is None for r in results)
            if not path.endswith("/step"):
                return None
            f.steps += 1
            finite = [r for r in results if isinstance(r.get("log_density"), float | int)]
            fault = None
            for name in ("unavailable", "refused", "lost"):
                if f.steps in getattr(f, name):
                    fault = name
                    f.retry_expected.update(ids)
            if fault == "refused":
                f.refuse_again.add(body)
            elif fault is None and body in f.refuse_again:
                # The second refusal waits for a request with no fault of its own: with
                # a client that backs off, the retry can land on another fault's number.
                f.refuse_again.discard(body)
                fault = "refused"
            if fault is None and f.steps >= f.rival and not f.rival_ids and finite and fresh:
                fault = "rival"
                f.rival_ids.add(finite[0]["id"])
            if fault is not None:
                f.injected[fault] += 1
            return fault


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    server: FaultyProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(b"")

    def do_DELETE(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def _forward(self, body: bytes) -> None:
        proxy = self.server
        fault = proxy.decide(self.path, body) if self.command == "POST" else None
        if fault == "unavailable":
            problem = {
                "type": "https://kameleon.dev/problems/store-unavailable",
                "title": "Store unavailable",
                "status": 503,
                "detail": "injected by the test proxy",
            }
            self._answer(503, json.dumps(problem).encode(), {"retry-after": "1"})
            return
        if fault == "refused":
            self.close_connection = True
            return
        if fault == "rival":
            self._rival(body)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
        if "x-api-key" in (k.lower() for k in self.headers):
            headers["X-API-Key"] = self.headers["X-API-Key"]
        upstream = proxy.client().request(
            self.command, self.path, content=body or None, headers=headers
        )
        if fault == "lost":
            self.close_connection = True
            return
        kept = {k: v for k, v in upstream.headers.items() if k.lower() in _FORWARDED_HEADERS}
        self._answer(upstream.status_code, upstream.content, kept)

    def _rival(self, body: bytes) -> None:
        """Tell the first finite result first, 1e-9 off: the client's copy conflicts."""
        results = json.loads(body)["results"]
        first = next(r for r in results if r["id"] in self.server.faults.rival_ids)
        tell = self.path.rsplit("/", 1)[0] + "/tell"
        rival = {"results": [{"id": first["id"], "log_density": first["log_density"] + 1e-9}]}
        answer = self.server.client().post(tell, json=rival)
        if answer.status_code != 200:
            with self.server.lock:
                self.server.faults.errors.append(f"rival tell: {answer.text}")

    def _answer(self, status: int, content: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)


@contextmanager
def faulty_proxy(upstream: str, faults: Faults | None = None) -> Iterator[FaultyProxy]:
    """Run a :class:`FaultyProxy` in front of ``upstream`` for the duration."""
    proxy = FaultyProxy(upstream, faults or Faults())
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        proxy.upstream_client.close()
        thread.join(timeout=5)
