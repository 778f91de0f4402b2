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

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import tenacity

from kameleon._protocol import (
    DEFAULT_URL,
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
from kameleon.aio import AsyncClient
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

__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "TellInput"]


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
                    headers=call.request_headers(),
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
        idempotency_key: str | None = None,
        open_ended: bool = False,
    ) -> Session:
        """``POST /v1/sessions``; omitted fields take the service's defaults. ``initial``:
        one point for every chain, or one row per chain. Retried like every call: its
        retries carry one ``Idempotency-Key`` (a new one per call unless given), so a
        create whose answer was lost makes one session, not two. ``max_iterations``
        omitted takes the service's default (warm-up + 2000); ``open_ended=True`` asks
        for a session with no end but its stopping rule (``max_iterations: null``)."""
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

    def update_session(
        self,
        session_id: str,
        *,
        max_iterations: int | Unset | None = UNSET,
        stop: Mapping[str, Any] | Unset | None = UNSET,
    ) -> Session:
        """``PATCH /v1/sessions/{id}``: a later ``max_iterations`` (``None``: no end) or
        another stopping rule (``None``: none); what is not given stays. A session that
        was done goes on."""
        return Session.from_json(self._json(_update_call(session_id, max_iterations, stop)))

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

    def renew_leases(
        self, session_id: str, ids: Sequence[str], lease_seconds: float
    ) -> list[Lease]:
        """Make the leases of the outstanding proposals ``ids`` run out ``lease_seconds``
        from now (an evaluation that takes longer than its lease)."""
        if not lease_seconds > 0:
            raise ValueError("lease_seconds must be positive (release_leases hands back)")
        answer = self._json(_leases_call(session_id, ids, lease_seconds))
        return [Lease.from_json(doc) for doc in answer["leases"]]

    def release_leases(self, session_id: str, ids: Sequence[str]) -> list[Lease]:
        """Hand the outstanding proposals ``ids`` back: the next ask hands them out again."""
        answer = self._json(_leases_call(session_id, ids, 0.0))
        return [Lease.from_json(doc) for doc in answer["leases"]]

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

    def consensus(
        self,
        session_ids: Sequence[str],
        *,
        method: Literal["weighted", "gaussian"] = "weighted",
        draws: int | None = None,
        seed: int = 0,
    ) -> Consensus:
        """Consensus Monte Carlo: the sessions ``session_ids`` each sampled the
        subposterior of one shard of a data set (its prior raised to ``1/J``, by the
        session's ``prior_power`` or by the client); their post-warm-up draws combined into
        draws of the full posterior by ``method`` (``"weighted"``: Scott et al.'s
        precision-weighted average; ``"gaussian"``: the product of the shards' Gaussian
        approximations). Exact for Gaussian subposteriors; see ``warnings``."""
        body = _drop_none(sessions=list(session_ids), method=method, draws=draws, seed=seed)
        doc = self._json(_Call("POST", "consensus", body))
        return Consensus.from_json(doc)

    def weights(self, session_id: str) -> npt.NDArray[np.float64]:
        """The log weight of every post-warm-up draw, shape ``(chains, draws)`` (the
        chains cut to a common length): for ``importance`` against the mixture of every
        chain's proposal, as the evidence weighs them; 0 for a Markov chain's draws."""
        return log_weights_from_json(self._json(_Call("GET", f"sessions/{session_id}/weights")))

    def diagnostics(self, session_id: str) -> Diagnostics:
        """Diagnostics and warnings of the post-warm-up draws."""
        return Diagnostics.from_json(self._json(_Call("GET", f"sessions/{session_id}/diagnostics")))
