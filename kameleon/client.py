"""HTTP clients for the whole protocol: :class:`Client` (blocking) and :class:`AsyncClient`.

Both speak ``/v1`` of a Kameleon service (PROTOCOL.md, openapi.yaml), return the typed
answers of :mod:`kameleon.models`, raise error answers as the exceptions of
:mod:`kameleon.errors`, and retry what is safe to retry (see :class:`Client`)::

    with kameleon.Client("http://127.0.0.1:8000") as client:
        session = client.create_session(dim=2, chains=4, seed=1, max_iterations=2000)
        answer = client.ask(session.id, max=4)
        while answer.proposals:
            results = [(p.id, logdensity(p.x)) for p in answer.proposals]
            answer = client.step(session.id, results, max=4)
        draws = client.draws(session.id).draws  # (chains, draws, dim)
"""

from __future__ import annotations

import io
import logging
import math
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import numpy as np
import orjson
import tenacity

from kameleon.errors import KameleonError, Unavailable, error_from_response
from kameleon.models import (
    ChainSummary,
    Diagnostics,
    Draws,
    Health,
    Session,
    SessionPage,
    StepAnswer,
    TellOutcome,
)

__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "TellInput"]

log = logging.getLogger("kameleon.client")

#: Where the clients look without a ``url`` (and without ``KAMELEON_URL``).
DEFAULT_URL = "http://127.0.0.1:8000"

#: A result to tell: ``{"id": ..., "log_density": ..., "gradient": [...]}`` or the pair
#: ``(id, log_density)``. A log density of ``-inf`` or ``None`` is outside the support.
TellInput = Mapping[str, Any] | tuple[str, float | None]

#: Failures after which the request certainly did not reach the service.
_NOT_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
#: Statuses of a proxy whose upstream failed: the request may or may not have arrived.
_GATEWAY = (502, 504)


def _retryable(exc: BaseException, idempotent: bool) -> bool:
    """Whether ``exc`` may be retried: never sent, or a 503 (nothing changed), or, for a
    request that may be repeated without harm, any transport failure or gateway error."""
    if isinstance(exc, (*_NOT_SENT, Unavailable)):
        return True
    if not idempotent:
        return False
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, KameleonError) and exc.status in _GATEWAY


@dataclass(frozen=True, slots=True)
class _Call:
    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None
    idempotent: bool = True
    wait: float = 0.0  # the server may hold the request this long (a long poll)


def _log_density(value: Any) -> float | None:
    """The JSON spelling of a told value: ``None`` outside the support."""
    if value is None:
        return None
    v = float(value)
    if v == -math.inf:
        return None
    if math.isnan(v) or v == math.inf:
        raise ValueError(f"a log density must be a number or -inf, not {v}")
    return v


def _results(results: Sequence[TellInput]) -> list[dict[str, Any]]:
    out = []
    for r in results:
        if isinstance(r, tuple):
            rid, value = r
            out.append({"id": str(rid), "log_density": _log_density(value)})
        else:
            item: dict[str, Any] = {
                "id": str(r["id"]),
                "log_density": _log_density(r.get("log_density")),
            }
            if r.get("gradient") is not None:
                item["gradient"] = [float(g) for g in r["gradient"]]
            out.append(item)
    return out


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _step_call(
    session_id: str,
    verb: str,
    results: Sequence[TellInput] | None,
    max: int | None,
    lease_seconds: float | None,
    wait_seconds: float | None,
    request_id: str | None,
) -> _Call:
    """An ask or a step, named by a request id that its retries repeat."""
    body = _drop_none(
        results=None if results is None else _results(results),
        max=max,
        lease_seconds=lease_seconds,
        wait_seconds=wait_seconds,
        request_id=request_id or uuid.uuid4().hex,
    )
    return _Call("POST", f"sessions/{session_id}/{verb}", body, wait=wait_seconds or 0.0)


class _Protocol:
    """What both clients share: the requests of the protocol and how answers are read."""

    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        retry_seconds: float,
        retry_max_wait: float,
    ) -> None:
        base = (url or os.environ.get("KAMELEON_URL") or DEFAULT_URL).rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        self.url = base
        key = api_key if api_key is not None else os.environ.get("KAMELEON_API_KEY")
        self._headers = {"X-API-Key": key} if key else {}
        if retry_seconds < 0 or retry_max_wait <= 0:
            raise ValueError("retry_seconds must be non-negative and retry_max_wait positive")
        self.retry_seconds = retry_seconds
        self.retry_max_wait = retry_max_wait

    def _retry_args(self, idempotent: bool) -> dict[str, Any]:
        """Exponential backoff with full jitter (a random wait up to 0.1 s, 0.2 s, 0.4 s,
        ... capped at ``retry_max_wait``) until ``retry_seconds`` have passed."""
        return {
            "retry": tenacity.retry_if_exception(lambda e: _retryable(e, idempotent)),
            "wait": tenacity.wait_random_exponential(multiplier=0.1, max=self.retry_max_wait),
            "stop": tenacity.stop_after_delay(self.retry_seconds),
            "reraise": True,
            "before_sleep": _log_retry,
        }

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise error_from_response(response)
        if response.status_code == 204 or not response.content:
            return None
        return orjson.loads(response.content)

    # ------------------------------------------------------------------- requests

    @staticmethod
    def _create(
        dim: int,
        algorithm: str | None,
        chains: int | None,
        initial: Any,
        initial_radius: float | None,
        max_initial_attempts: int | None,
        seed: int | None,
        pseudo_marginal: bool | None,
        warmup: int | None,
        max_iterations: int | None,
        param_names: Sequence[str] | None,
        options: Mapping[str, Any] | None,
        stop: Mapping[str, Any] | None,
    ) -> _Call:
        if initial is not None:
            rows = np.asarray(initial, dtype=np.float64)
            initial = (rows.reshape(1, -1) if rows.ndim == 1 else rows).tolist()
        body = _drop_none(
            algorithm=algorithm,
            dim=dim,
            chains=chains,
            initial=initial,
            initial_radius=initial_radius,
            max_initial_attempts=max_initial_attempts,
            seed=seed,
            pseudo_marginal=pseudo_marginal,
            warmup=warmup,
            max_iterations=max_iterations,
            param_names=list(param_names) if param_names is not None else None,
            options=dict(options) if options is not None else None,
            stop=dict(stop) if stop is not None else None,
        )
        # A lost answer to a create may have created a session: retried only when
        # the request certainly did not arrive, or was answered 503.
        return _Call("POST", "sessions", body, idempotent=False)

    @staticmethod
    def _draws_params(
        chain: int | None,
        start: int,
        stop: int | None,
        thin: int,
        include_warmup: bool,
        format: str,
    ) -> dict[str, Any]:
        if format not in ("json", "npy"):
            raise ValueError("format must be 'json' or 'npy'")
        params: dict[str, Any] = {"start": start, "thin": thin, "format": format}
        if chain is not None:
            params["chain"] = chain
        if stop is not None:
            params["stop"] = stop
        if include_warmup:
            params["include_warmup"] = "true"
        return params

    @staticmethod
    def _next(response: httpx.Response, doc: Any, format: str) -> str | None:
        """The absolute URL of the next page, or None: JSON's ``next`` or the ``Link``
        header, a relative reference resolved against the request's URL."""
        ref = doc.get("next") if format == "json" else response.links.get("next", {}).get("url")
        return str(response.url.join(ref)) if ref else None


def _timeout(http: httpx.Client | httpx.AsyncClient, wait: float) -> Any:
    """The client's timeouts, the read timeout lengthened by a long poll's wait."""
    if not wait:
        return httpx.USE_CLIENT_DEFAULT
    base = http.timeout
    return httpx.Timeout(
        connect=base.connect, read=(base.read or 0.0) + wait, write=base.write, pool=base.pool
    )


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("retrying in %.2f s after %s", wait, exc)


def _npy(content: bytes) -> np.ndarray[Any, np.dtype[np.float64]]:
    array: np.ndarray[Any, np.dtype[np.float64]] = np.load(io.BytesIO(content), allow_pickle=False)
    return array


def _join_npy(
    pages: list[np.ndarray[Any, np.dtype[np.float64]]], session: Session, chain: int | None
) -> Draws:
    """NPY pages, each ``(chains, rows, dim)``, joined along the draws."""
    chains = [chain] if chain is not None else list(range(session.chains))
    shaped = [p for p in pages if p.size] or [np.empty((len(chains), 0, session.dim))]
    joined = np.concatenate(shaped, axis=1)
    return Draws(session.param_names, joined, None, None, chains)


class Client(_Protocol):
    """A blocking client of a Kameleon service.

    Parameters
    ----------
    url
        The service's base URL (with or without ``/v1``); default ``KAMELEON_URL``, else
        ``http://127.0.0.1:8000``.
    api_key
        Sent as ``X-API-Key``; default ``KAMELEON_API_KEY``, else none.
    timeout
        Seconds for each request (connect, read, write).
    retry_seconds
        How long to keep retrying a request that failed in a way that is safe to retry:
        the connection failed, the service answered 503 (its store is unreachable and
        nothing changed), or, for a request that may be repeated (everything but
        creating a session and resetting a chain), any transport error or a proxy's
        502 or 504. Repeating a tell is safe: a result told twice with the same value
        answers ``duplicate`` and changes nothing. ``0`` disables retries.
    retry_max_wait
        The longest wait between two tries (the waits grow exponentially, with jitter).
    transport
        An ``httpx`` transport, for tests.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry_seconds: float = 60.0,
        retry_max_wait: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, api_key, retry_seconds, retry_max_wait)
        self._http = httpx.Client(
            base_url=self.url + "/", headers=self._headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: _Call) -> httpx.Response:
        """One call, retried as :class:`Client` says; an error answer raises."""
        for attempt in tenacity.Retrying(**self._retry_args(call.idempotent)):
            with attempt:
                response = self._http.request(
                    call.method,
                    call.path,
                    content=None if call.body is None else orjson.dumps(call.body),
                    headers={"Content-Type": "application/json"} if call.body is not None else None,
                    params=call.params,
                    timeout=_timeout(self._http, call.wait),
                )
                if response.status_code >= 400:
                    raise error_from_response(response)
        return response

    def _json(self, call: _Call) -> Any:
        return self._answer(self._send(call))

    # ------------------------------------------------------------------- sessions

    def health(self) -> Health:
        """``GET /v1/health``. A store that is not ready answers 503: :class:`Unavailable`
        (after the retries)."""
        return Health.from_json(self._json(_Call("GET", "health")))

    def create_session(
        self,
        dim: int,
        *,
        algorithm: str | None = None,
        chains: int | None = None,
        initial: Any = None,
        initial_radius: float | None = None,
        max_initial_attempts: int | None = None,
        seed: int | None = None,
        pseudo_marginal: bool | None = None,
        warmup: int | None = None,
        max_iterations: int | None = None,
        param_names: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
        stop: Mapping[str, Any] | None = None,
    ) -> Session:
        """``POST /v1/sessions``; omitted fields take the service's defaults. ``initial``:
        one point for every chain, or one row per chain."""
        call = self._create(
            dim,
            algorithm,
            chains,
            initial,
            initial_radius,
            max_initial_attempts,
            seed,
            pseudo_marginal,
            warmup,
            max_iterations,
            param_names,
            options,
            stop,
        )
        return Session.from_json(self._json(call))

    def list_sessions(self, *, limit: int | None = None, cursor: str | None = None) -> SessionPage:
        """One page of ``GET /v1/sessions``: the caller's sessions, oldest first."""
        params = _drop_none(limit=limit, cursor=cursor)
        return SessionPage.from_json(self._json(_Call("GET", "sessions", params=params)))

    def iter_sessions(self, *, limit: int | None = None) -> Iterator[Session]:
        """Every session of the caller, the pages followed."""
        cursor: str | None = None
        while True:
            page = self.list_sessions(limit=limit, cursor=cursor)
            yield from page.sessions
            if not page.next:
                return
            cursor = page.next

    def get_session(self, session_id: str) -> Session:
        return Session.from_json(self._json(_Call("GET", f"sessions/{session_id}")))

    def delete_session(self, session_id: str) -> None:
        self._json(_Call("DELETE", f"sessions/{session_id}"))

    # --------------------------------------------------------------- ask and tell

    def ask(
        self,
        session_id: str,
        *,
        max: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float | None = None,
        request_id: str | None = None,
    ) -> StepAnswer:
        """Up to ``max`` proposals, each leased for ``lease_seconds`` (the service's default
        without). With nothing to hand out, the server holds the request up to
        ``wait_seconds`` for a proposal to free up. Every call carries a ``request_id``
        (a new one unless given) that its retries repeat, so a retried ask whose answer
        was lost gets the same proposals back."""
        call = _step_call(session_id, "ask", None, max, lease_seconds, wait_seconds, request_id)
        return StepAnswer.from_json(self._json(call))

    def tell(self, session_id: str, results: Sequence[TellInput]) -> list[TellOutcome]:
        """Tell results, each applied exactly once (a repeat answers ``duplicate``)."""
        body = {"results": _results(results)}
        doc = self._json(_Call("POST", f"sessions/{session_id}/tell", body))
        return StepAnswer.from_json(doc).results

    def step(
        self,
        session_id: str,
        results: Sequence[TellInput] = (),
        *,
        max: int | None = None,
        lease_seconds: float | None = None,
        wait_seconds: float | None = None,
        request_id: str | None = None,
    ) -> StepAnswer:
        """Tell ``results``, then ask for up to ``max`` proposals (default: one per result);
        ``wait_seconds`` and ``request_id`` as for :meth:`ask`."""
        call = _step_call(session_id, "step", results, max, lease_seconds, wait_seconds, request_id)
        return StepAnswer.from_json(self._json(call))

    def reset_chain(self, session_id: str, chain: int, initial: Sequence[float]) -> ChainSummary:
        """Give ``chain`` a new initial point (it is used exactly)."""
        body = {"initial": [float(v) for v in initial]}
        call = _Call("POST", f"sessions/{session_id}/chains/{chain}/reset", body, idempotent=False)
        return ChainSummary.from_json(self._json(call))

    # ------------------------------------------------------- draws, diagnostics

    def draws(
        self,
        session_id: str,
        *,
        chain: int | None = None,
        start: int = 0,
        stop: int | None = None,
        thin: int = 1,
        include_warmup: bool = False,
        format: Literal["json", "npy"] = "json",
    ) -> Draws:
        """The draws (post-warm-up unless ``include_warmup``), every page read. JSON
        carries log densities and iteration numbers; NPY is smaller, draws only."""
        params: dict[str, Any] | None = self._draws_params(
            chain, start, stop, thin, include_warmup, format
        )
        url: str | None = f"sessions/{session_id}/draws"
        docs: list[Any] = []
        arrays: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        while url is not None:
            response = self._send(_Call("GET", url, params=params))
            params = None  # the next page's URL carries them
            if format == "json":
                doc = self._answer(response)
                docs.append(doc)
            else:
                doc = None
                arrays.append(_npy(response.content))
            url = self._next(response, doc, format)
        if format == "json":
            return Draws.from_pages(docs)
        return _join_npy(arrays, self.get_session(session_id), chain)

    def diagnostics(self, session_id: str) -> Diagnostics:
        """Diagnostics and warnings of the post-warm-up draws."""
        return Diagnostics.from_json(self._json(_Call("GET", f"sessions/{session_id}/diagnostics")))


class AsyncClient(_Protocol):
    """The asynchronous twin of :class:`Client` (same parameters, same methods, each a
    coroutine; ``iter_sessions`` an async iterator)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry_seconds: float = 60.0,
        retry_max_wait: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, api_key, retry_seconds, retry_max_wait)
        self._http = httpx.AsyncClient(
            base_url=self.url + "/", headers=self._headers, timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: _Call) -> httpx.Response:
        async for attempt in tenacity.AsyncRetrying(**self._retry_args(call.idempotent)):
            with attempt:
                response = await self._http.request(
                    call.method,
                    call.path,
                    content=None if call.body is None else orjson.dumps(call.body),
                    headers={"Content-Type": "application/json"} if call.body is not None else None,
                    params=call.params,
                    timeout=_timeout(self._http, call.wait),
                )
                if response.status_code >= 400:
                    raise error_from_response(response)
        return response

    async def _json(self, call: _Call) -> Any:
        return self._answer(await self._send(call))

    async def health(self) -> Health:
        return Health.from_json(await self._json(_Call("GET", "health")))

    async def create_session(
        self,
        dim: int,
        *,
        algorithm: str | None = None,
        chains: int | None = None,
        initial: Any = None,
        initial_radius: float | None = None,
        max_initial_attempts: int | None = None,
        seed: int | None = None,
        pseudo_marginal: bool | None = None,
        warmup: int | None = None,
        max_iterations: int | None = None,
        param_names: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
        stop: Mapping[str, Any] | None = None,
    ) -> Session:
        call = self._create(
            dim,
            algorithm,
            chains,
            initial,
            initial_radius,
            max_initial_attempts,
            seed,
            pseudo_marginal,
            warmup,
            max_iterations,
            param_names,
            options,
            stop,
        )
        return Session.from_json(await self._json(call))

    async def list_sessions(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> SessionPage:
        params = _drop_none(limit=limit, cursor=cursor)
        return SessionPage.from_json(await self._json(_Call("GET", "sessions", params=params)))

    async def iter_sessions(self, *, limit: int | None = None) -> AsyncIterator[Session]:
        cursor: str | None = None
        while True:
            page = await self.list_sessions(limit=limit, cursor=cursor)
            for session in page.sessions:
                yield session
            if not page.next:
                return
            cursor = page.next

    async def get_session(self, session_id: str) -> Session:
        return Session.from_json(await self._json(_Call("GET", f"sessions/{session_id}")))

    async def delete_session(self, session_id: str) -> None:
        await self._json(_Call("DELETE", f"sessions/{session_id}"))

    async def ask(
        self,
        session_id: str,
        *,
        max: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float | None = None,
        request_id: str | None = None,
    ) -> StepAnswer:
        call = _step_call(session_id, "ask", None, max, lease_seconds, wait_seconds, request_id)
        return StepAnswer.from_json(await self._json(call))

    async def tell(self, session_id: str, results: Sequence[TellInput]) -> list[TellOutcome]:
        body = {"results": _results(results)}
        doc = await self._json(_Call("POST", f"sessions/{session_id}/tell", body))
        return StepAnswer.from_json(doc).results

    async def step(
        self,
        session_id: str,
        results: Sequence[TellInput] = (),
        *,
        max: int | None = None,
        lease_seconds: float | None = None,
        wait_seconds: float | None = None,
        request_id: str | None = None,
    ) -> StepAnswer:
        call = _step_call(session_id, "step", results, max, lease_seconds, wait_seconds, request_id)
        return StepAnswer.from_json(await self._json(call))

    async def reset_chain(
        self, session_id: str, chain: int, initial: Sequence[float]
    ) -> ChainSummary:
        body = {"initial": [float(v) for v in initial]}
        call = _Call("POST", f"sessions/{session_id}/chains/{chain}/reset", body, idempotent=False)
        return ChainSummary.from_json(await self._json(call))

    async def draws(
        self,
        session_id: str,
        *,
        chain: int | None = None,
        start: int = 0,
        stop: int | None = None,
        thin: int = 1,
        include_warmup: bool = False,
        format: Literal["json", "npy"] = "json",
    ) -> Draws:
        params: dict[str, Any] | None = self._draws_params(
            chain, start, stop, thin, include_warmup, format
        )
        url: str | None = f"sessions/{session_id}/draws"
        docs: list[Any] = []
        arrays: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        while url is not None:
            response = await self._send(_Call("GET", url, params=params))
            params = None
            if format == "json":
                doc = self._answer(response)
                docs.append(doc)
            else:
                doc = None
                arrays.append(_npy(response.content))
            url = self._next(response, doc, format)
        if format == "json":
            return Draws.from_pages(docs)
        return _join_npy(arrays, await self.get_session(session_id), chain)

    async def diagnostics(self, session_id: str) -> Diagnostics:
        doc = await self._json(_Call("GET", f"sessions/{session_id}/diagnostics"))
        return Diagnostics.from_json(doc)
