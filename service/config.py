"""Settings, read from ``KAMELEON_*`` environment variables (and overridden by CLI flags)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kameleon.service.store.backends import STORES

__all__ = ["Settings", "hash_api_key", "is_api_key_hash"]

_HEX = frozenset("0123456789abcdef")


def hash_api_key(key: str) -> str:
    """The SHA-256 hex digest under which an API key is stored and compared."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def is_api_key_hash(text: str) -> bool:
    """Whether ``text`` is a lowercase SHA-256 hex digest, as :func:`hash_api_key` gives."""
    return len(text) == 64 and all(c in _HEX for c in text)


def _read_key_hashes(path: Path) -> list[str]:
    """The hashes in a key file: one a line; blank lines and ``#`` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read {path}: {reason}") from None
    hashes = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        # Never echo the line: it may be a key written where its hash belongs.
        if not is_api_key_hash(entry):
            raise ValueError(
                f"{path}, line {number}: not a SHA-256 hex digest "
                "(64 lowercase hex digits; `kameleon hash-key` prints one)"
            )
        hashes.append(entry)
    if not hashes:
        raise ValueError(f"{path} holds no key hash")
    return hashes


class Settings(BaseSettings):
    """Service configuration.

    Every field can be set from the environment as ``KAMELEON_<FIELD>`` (for example
    ``KAMELEON_STORE=redis``, ``KAMELEON_REDIS_URL=redis://host:6379/0``).
    """

    model_config = SettingsConfigDict(env_prefix="KAMELEON_", env_ignore_empty=True, extra="ignore")

    host: str = Field("127.0.0.1", description="Address to bind; loopback unless told otherwise.")
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, le=64, description="Service processes (redis store only).")
    store: str = Field(
        "memory",
        description="Where sessions live: "
        + "; ".join(f"`{b.name}`, {b.description}" for b in STORES.values())
        + ".",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis URL (store=redis); `redis+cluster://host:port` for a Redis Cluster.",
    )
    redis_prefix: str = Field("kameleon", description="Prefix of every Redis key.")
    store_timeout_seconds: float = Field(
        2.0,
        gt=0,
        le=60,
        description="How long a request waits for Redis before it answers 503 (nothing "
        "changed: a write that Redis runs later than that changes nothing).",
    )
    store_max_connections: int = Field(
        256,
        ge=1,
        le=100_000,
        description="Most store operations (Redis connections; per node, for a cluster) "
        "one service process runs at once. More wait, up to store_timeout_seconds, for one "
        "to finish; then the request answers 503 `service-busy` (nothing changed).",
    )
    session_ttl_seconds: int = Field(
        7 * 24 * 3600, ge=60, description="A session idle this long expires (redis store)."
    )
    api_key_hashes: list[str] = Field(
        default_factory=list,
        description="SHA-256 hex digests of accepted API keys (a JSON list); empty: no keys "
        "required.",
    )
    api_key_hashes_file: Path | None = Field(
        None,
        description="A file of more accepted key hashes, one a line (blank lines and `#` "
        "comments skipped); read at start-up and added to api_key_hashes.",
    )
    allow_unauthenticated: bool = Field(
        False,
        description="Serve on a non-loopback address with no API keys (`kameleon serve` "
        "refuses to otherwise).",
    )
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_dim: int = Field(10_000, ge=1)
    max_chains: int = Field(4096, ge=1)
    max_ask: int = Field(4096, ge=1, description="Largest `max` of one ask or step.")
    max_iterations_limit: int = Field(100_000_000, ge=1)
    max_session_bytes: int = Field(
        2**30,
        ge=1,
        description="Largest memory a session may need (its chains' states, and its draws "
        "when it has max_iterations), estimated before it is made: over it, 422.",
    )
    max_sessions_per_key: int = Field(
        1000, ge=1, description="Most sessions one API key (or the anonymous user) keeps: 429."
    )
    max_bytes_per_key: int = Field(
        8 * 2**30,
        ge=1,
        description="Most memory, estimated as for max_session_bytes, that one key's "
        "sessions may need together: 429.",
    )
    max_bytes_total: int = Field(
        64 * 2**30,
        ge=1,
        description="Most memory, estimated as for max_session_bytes, that the sessions "
        "of every key may need together (the store's whole budget): 429.",
    )
    request_read_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="A request must arrive whole (headers and body) this long after the "
        "connection opened or its first byte (`kameleon serve`): else 408, or the "
        "connection is closed. Bounds slow clients when the service is exposed directly.",
    )
    default_lease_seconds: float = Field(60.0, gt=0)
    max_lease_seconds: float = Field(24 * 3600.0, gt=0)
    max_wait_seconds: float = Field(
        30.0, ge=0, description="Longest `wait_seconds` (long poll) of one ask or step."
    )
    draws_page_size: int = Field(
        10_000,
        ge=1,
        description="Draws in one page of `GET .../draws`, over all the chains it selects "
        "(the default of its `page_size`).",
    )
    max_draws_page_size: int = Field(
        100_000, ge=1, description="Largest `page_size` a client may ask of `GET .../draws`."
    )
    malloc_trim: bool = Field(
        True,
        description="After sessions are deleted, give the memory they freed back to the "
        "system (glibc's malloc_trim, in a thread, at most every 5 s; nothing where the C "
        "library has none). Off: the process keeps freed memory for reuse.",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = Field(
        "text", description="`json`: every log line one JSON object, for log collectors."
    )
    log_requests: bool = Field(
        False, description="Log one line per request (method, route, status, duration)."
    )
    metrics: bool = Field(
        True, description="Serve Prometheus metrics at GET /metrics (with a key when keys are set)."
    )
    opentelemetry: bool = Field(
        False,
        description="Let FastAPI report each request's trace, metrics and logs to the "
        "OpenTelemetry providers configured in the process (off: it looks for them on every "
        "request, about 7% of a one-chain step, even when there are none).",
    )

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if value not in STORES:
            raise ValueError(f"no store {value!r}: choose one of {', '.join(STORES)}")
        return value

    @field_validator("api_key_hashes")
    @classmethod
    def _hex_digests(cls, value: list[str]) -> list[str]:
        for number, digest in enumerate(value, start=1):
            if not is_api_key_hash(digest):
                raise ValueError(
                    f"entry {number} is not a SHA-256 hex digest "
                    "(64 lowercase hex digits; `kameleon hash-key` prints one)"
                )
        return value

    @field_validator("api_key_hashes_file")
    @classmethod
    def _hashes_from_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # Fields are validated in the order they are declared: api_key_hashes is in
        # info.data by now (unless it was itself invalid, which is reported too).
        if value is not None:
            from_file = _read_key_hashes(value)
            hashes = info.data.get("api_key_hashes")
            if isinstance(hashes, list):
                hashes.extend(h for h in dict.fromkeys(from_file) if h not in hashes)
        return value
