"""What :class:`~kameleon.client.Client` and :class:`~kameleon.client.AsyncClient`
share: the requests of the protocol, how answers are read, and what is retried."""

from __future__ import annotations

import enum
import io
import logging
import math
import os
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import orjson
import tenacity

from kameleon.errors import KameleonError, Unavailable, error_from_response
from kameleon.models import (
    Draws,
    Session,
)

__all__ = ["DEFAULT_URL", "TellInput"]

log = logging.getLogger("kameleon.client")

#: Where the clients look without a ``url`` (and without ``KAMELEON_URL``).
DEFAULT_URL = "http://127.0.0.1:8000"

#: A result to tell: ``{"id": ..., "log_density": ..., "gradient": [...]}`` (with
#: ``"draw": [...]`` at a ``gibbs`` conditional proposal; or the target in parts,
#: ``"log_prior"`` and ``"log_likelihood"``, with ``"prior_gradient"`` for a gradient
#: sampler, ``log_density`` then optional) or the pair ``(id, log_density)``. A log
#: density of ``-inf`` or ``None`` is outside the support.
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
    headers: Mapping[str, str] | None = None

    def request_headers(self) -> dict[str, str] | None:
        """The call's own headers, and the body's content type."""
        headers = dict(self.headers or {})
        if self.body is not None:
            headers["Content-Type"] = "application/json"
        return headers or None


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
            item: dict[str, Any] = {"id": str(r["id"])}
            parts = "log_prior" in r or "log_likelihood" in r
            if "log_density" in r or not parts:
                item["log_density"] = _log_density(r.get("log_density"))
            for name in ("log_prior", "log_likelihood"):  # the target in parts
                if name in r:
                    item[name] = _log_density(r[name])
            if r.get("prior_gradient") is not None:
                item["prior_gradient"] = [float(g) for g in r["prior_gradient"]]
            if r.get("gradient") is not None:
                item["gradient"] = [float(g) for g in r["gradient"]]
            if r.get("draw") is not None:  # gibbs: a conditional block's draw
                item["draw"] = [float(v) for v in r["draw"]]
            out.append(item)
    return out


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "unset"


#: A field an update leaves as it is (``None`` is a value: ``null``).
UNSET = Unset.UNSET


def _update_call(
    session_id: str, max_iterations: int | Unset | None, stop: Mapping[str, Any] | Unset | None
) -> _Call:
    """``PATCH /v1/sessions/{id}`` with the fields given (a retry changes nothing more)."""
    body: dict[str, Any] = {}
    if max_iterations is not UNSET:
        body["max_iterations"] = max_iterations
    if stop is not UNSET:
        body["stop"] = None if stop is None else dict(stop)
    return _Call("PATCH", f"sessions/{session_id}", body)


def _leases_call(session_id: str, ids: Sequence[str], lease_seconds: float) -> _Call:
    """``POST /v1/sessions/{id}/leases`` (a retry sets the same leases again)."""
    body = {"ids": [str(i) for i in ids], "lease_seconds": float(lease_seconds)}
    return _Call("POST", f"sessions/{session_id}/leases", body)


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
        idempotency_key: str | None = None,
        open_ended: bool = False,
    ) -> _Call:
        if open_ended and max_iterations is not None:
            raise ValueError("give max_iterations or open_ended=True, not both")
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
        if open_ended:  # an explicit null: no end but the stopping rule or a delete
            body["max_iterations"] = None
        # A lost answer to a create may have created a session: its retries carry the
        # same idempotency key, and the service answers the session the first made.
        key = idempotency_key if idempotency_key is not None else secrets.token_hex(16)
        return _Call("POST", "sessions", body, headers={"Idempotency-Key": key})

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
