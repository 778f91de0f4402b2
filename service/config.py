"""Settings, read from ``KAMELEON_*`` environment variables (and overridden by CLI flags)."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "hash_api_key"]


def hash_api_key(key: str) -> str:
    """The SHA-256 hex digest under which an API key is stored and compared."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class Settings(BaseSettings):
    """Service configuration.

    Every field can be set from the environment as ``KAMELEON_<FIELD>`` (for example
    ``KAMELEON_STORE=redis``, ``KAMELEON_REDIS_URL=redis://host:6379/0``).
    """

    model_config = SettingsConfigDict(env_prefix="KAMELEON_", env_ignore_empty=True, extra="ignore")

    host: str = Field("127.0.0.1", description="Address to bind; loopback unless told otherwise.")
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, le=64, description="Service processes (redis store only).")
    store: Literal["memory", "redis"] = Field("memory", description="Where sessions live.")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL (store=redis).")
    redis_prefix: str = Field("kameleon", description="Prefix of every Redis key.")
    session_ttl_seconds: int = Field(
        7 * 24 * 3600, ge=60, description="A session idle this long expires (redis store)."
    )
    api_key_hashes: list[str] = Field(
        default_factory=list,
        description="SHA-256 hex digests of accepted API keys; empty: no keys required.",
    )
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_dim: int = Field(10_000, ge=1)
    max_chains: int = Field(4096, ge=1)
    max_ask: int = Field(4096, ge=1, description="Largest `max` of one ask or step.")
    max_iterations_limit: int = Field(100_000_000, ge=1)
    default_lease_seconds: float = Field(60.0, gt=0)
    max_lease_seconds: float = Field(24 * 3600.0, gt=0)
    draws_page_size: int = Field(10_000, ge=1, description="Draws per chain in one page.")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"

    @field_validator("api_key_hashes")
    @classmethod
    def _hex_digests(cls, value: list[str]) -> list[str]:
        for digest in value:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError("api_key_hashes must be lowercase SHA-256 hex digests")
        return value
