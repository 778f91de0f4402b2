"""The asynchronous client: :class:`AsyncClient`, the twin of :class:`kameleon.Client`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import tenacity

from kameleon._protocol import (
    UNSET,
    TellInput,
    Unset,
    _Call,
    _drop_none,
    _join_npy,
    _leases_call,
    _npy,
    _Protocol,
    _results,
    _step_call,
    _timeout,
    _update_call,
)
from kameleon.errors import error_from_response
from kameleon.models import (
    ChainSummary,
    Consensus,
    Diagnostics,
    Draws,
    Health,
    Lease,
    Session,
    SessionPage,
    StepAnswer,
    TellOutcome,
    log_weights_from_json,
)

__all__ = ["AsyncClient"]


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
                    headers=call.request_headers(),
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
        idempotency_key: str | None = None,
        open_ended: bool = False,
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
            idempotency_key,
            open_ended,
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

    async def update_session(
        self,
        session_id: str,
        *,
        max_iterations: int | Unset | None = UNSET,
        stop: Mapping[str, Any] | Unset | None = UNSET,
    ) -> Session:
        """``PATCH /v1/sessions/{id}``: a later ``max_iterations`` (``None``: no end) or
        another stopping rule (``None``: none); what is not given stays. A session that
        was done goes on."""
        return Session.from_json(await self._json(_update_call(session_id, max_iterations, stop)))

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

    async def renew_leases(
        self, session_id: str, ids: Sequence[str], lease_seconds: float
    ) -> list[Lease]:
        """Make the leases of the outstanding proposals ``ids`` run out ``lease_seconds``
        from now (an evaluation that takes longer than its lease)."""
        if not lease_seconds > 0:
            raise ValueError("lease_seconds must be positive (release_leases hands back)")
        answer = await self._json(_leases_call(session_id, ids, lease_seconds))
        return [Lease.from_json(doc) for doc in answer["leases"]]

    async def release_leases(self, session_id: str, ids: Sequence[str]) -> list[Lease]:
        """Hand the outstanding proposals ``ids`` back: the next ask hands them out again."""
        answer = await self._json(_leases_call(session_id, ids, 0.0))
        return [Lease.from_json(doc) for doc in answer["leases"]]

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

    async def consensus(
        self,
        session_ids: Sequence[str],
        *,
        method: Literal["weighted", "gaussian"] = "weighted",
        draws: int | None = None,
        seed: int = 0,
    ) -> Consensus:
        """See :meth:`kameleon.Client.consensus`."""
        body = _drop_none(sessions=list(session_ids), method=method, draws=draws, seed=seed)
        doc = await self._json(_Call("POST", "consensus", body))
        return Consensus.from_json(doc)

    async def weights(self, session_id: str) -> npt.NDArray[np.float64]:
        """:meth:`kameleon.Client.weights`."""
        doc = await self._json(_Call("GET", f"sessions/{session_id}/weights"))
        return log_weights_from_json(doc)

    async def diagnostics(self, session_id: str) -> Diagnostics:
        doc = await self._json(_Call("GET", f"sessions/{session_id}/diagnostics"))
        return Diagnostics.from_json(doc)
