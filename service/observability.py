"""What operators see: Prometheus metrics at ``GET /metrics`` and structured logs.

Metrics (prometheus-client, one registry per app):

- ``kameleon_requests_total{method, route, status}`` and
  ``kameleon_request_seconds{method, route}`` (a histogram), with the route as a template
  (``/v1/sessions/{id}/step``), so their number stays bounded;
- ``kameleon_results_total{outcome}``: told results by outcome (``accepted``,
  ``rejected``, ``initialized``, ``outside_support``, ``step``, ``duplicate``,
  ``held``);
- ``kameleon_proposals_total``: proposals handed out;
- ``kameleon_sessions_created_total``;
- ``kameleon_store_unavailable_total``: answers 503 because the store did not answer
  (unreachable, stalled past the store timeout, or still loading);
  ``kameleon_store_busy_total``: answers 503 because this process had every store
  connection in use for the whole store timeout (overloaded; the store was not asked).
  A 503 for contention on the same chains counts in neither.

Each service process counts its own requests (with ``--workers N`` a scrape through the
one port reaches one of them; scrape each process, or run one per container).

Logs: ``log_format=json`` writes every log line as one JSON object (``time``, ``level``,
``logger``, ``message``, and the request's fields), for log collectors; ``log_requests``
adds one line per request (method, route, status, duration, session). No API key or
request body is ever logged.

Every answer carries ``Server-Timing: app;dur=<ms>`` (W3C Server Timing): the time the
service spent on the request until it began to answer, in milliseconds, which browsers'
developer tools show and a client can add up to tell the service's time from the
network's and its own.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE_LATEST", "JsonFormatter", "Metrics", "RequestMetrics", "route_of"]

_SESSION = re.compile(r"^/v1/sessions/[^/]+")
_CHAIN = re.compile(r"/chains/[^/]+/")
_KNOWN = {
    "/v1/sessions",
    "/v1/sessions/{id}",
    "/v1/sessions/{id}/ask",
    "/v1/sessions/{id}/tell",
    "/v1/sessions/{id}/step",
    "/v1/sessions/{id}/draws",
    "/v1/sessions/{id}/diagnostics",
    "/v1/sessions/{id}/chains/{chain}/reset",
    "/v1/health",
    "/v1/health/live",
    "/v1/health/ready",
    "/v1/openapi.json",
    "/v1/docs",
    "/metrics",
}


def route_of(path: str) -> str:
    """The route template of a request path; ``other`` for a path the app does not
    serve (so that a scanner cannot blow up the number of series)."""
    template = _CHAIN.sub("/chains/{chain}/", _SESSION.sub("/v1/sessions/{id}", path))
    return template if template in _KNOWN else "other"


def _session_of(path: str) -> str | None:
    match = _SESSION.match(path)
    return match.group(0).rsplit("/", 1)[1] if match and path != "/v1/sessions" else None


class Metrics:
    """The app's counters and histograms, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kameleon_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kameleon_request_seconds",
            "Time to answer a request.",
            ["method", "route"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10, 30),
            registry=self.registry,
        )
        self.results = Counter(
            "kameleon_results", "Told results, by outcome.", ["outcome"], registry=self.registry
        )
        self._results_by_outcome: dict[str, Any] = {}
        self._requests_by_key: dict[tuple[str, str, int], Any] = {}
        self._latency_by_route: dict[tuple[str, str], Any] = {}
        self.proposals = Counter(
            "kameleon_proposals", "Proposals handed out.", registry=self.registry
        )
        self.sessions = Counter(
            "kameleon_sessions_created", "Sessions created.", registry=self.registry
        )
        self.unavailable = Counter(
            "kameleon_store_unavailable",
            "Requests answered 503 because the store did not answer.",
            registry=self.registry,
        )
        self.busy = Counter(
            "kameleon_store_busy",
            "Requests answered 503 because every store connection of this process stayed "
            "in use for the store timeout.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def count_session(self) -> None:
        self.sessions.inc()

    def count_store_failure(self, *, busy: bool) -> None:
        """A request answered 503 by a store that did not answer, or (``busy``) by a
        process with no store connection free."""
        (self.busy if busy else self.unavailable).inc()

    def count_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count and time one request (its labelled children kept: ``labels()``
        validates and locks, at every request otherwise)."""
        key = (method, route, status)
        counted = self._requests_by_key.get(key)
        if counted is None:
            counted = self._requests_by_key[key] = self.requests.labels(method, route, str(status))
        counted.inc()
        timed = self._latency_by_route.get(key[:2])
        if timed is None:
            timed = self._latency_by_route[key[:2]] = self.latency.labels(method, route)
        timed.observe(seconds)

    def count_answer(self, answer: dict[str, Any]) -> None:
        """Count a step, ask or tell answer's results and proposals."""
        outcomes: dict[str, int] = {}
        for result in answer.get("results") or ():
            outcome = result["outcome"]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for outcome, count in outcomes.items():  # one labelled child per outcome, not result
            child = self._results_by_outcome.get(outcome)
            if child is None:  # labels() validates and locks: once per outcome, not per answer
                child = self._results_by_outcome[outcome] = self.results.labels(outcome)
            child.inc(count)
        proposals = answer.get("proposals")
        if proposals:
            self.proposals.inc(len(proposals))


class RequestMetrics:
    """ASGI middleware: count and time every request, and log it if asked."""

    def __init__(self, app: ASGIApp, metrics: Metrics, log_requests: bool) -> None:
        self.app, self.metrics, self.log_requests = app, metrics, log_requests
        self.log = logging.getLogger("kameleon.requests")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                spent = 1e3 * (time.perf_counter() - started)
                timing = (b"server-timing", b"app;dur=%.3f" % spent)
                message = {**message, "headers": [*message.get("headers", ()), timing]}
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            elapsed = time.perf_counter() - started
            method, path = scope["method"], scope["path"]
            route = route_of(path)
            self.metrics.count_request(method, route, status, elapsed)
            if self.log_requests:
                self.log.info(
                    "%s %s %d %.1f ms",
                    method,
                    route,
                    status,
                    1e3 * elapsed,
                    extra={
                        "method": method,
                        "route": route,
                        "status": status,
                        "duration_ms": round(1e3 * elapsed, 3),
                        "session": _session_of(path),
                    },
                )


_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, and any extra fields."""

    converter = time.gmtime  # type: ignore[assignment]

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)
