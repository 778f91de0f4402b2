"""Typed dependencies of the routes.

All are ``async def``: FastAPI runs a plain ``def`` dependency in a thread pool, and the
hop costs more than everything else a ``step`` does.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from kameleon.service import problems
from kameleon.service.config import Settings, hash_api_key
from kameleon.service.sessions import SessionService

__all__ = [
    "API_KEY_HEADER",
    "OwnerDep",
    "SessionsDep",
    "SettingsDep",
    "bearer_token",
    "owner_of",
]

API_KEY_HEADER = "X-API-Key"
_api_key = APIKeyHeader(
    name=API_KEY_HEADER, auto_error=False, description="Required when keys are configured."
)
_bearer = HTTPBearer(
    auto_error=False,
    description="The same API key as `Authorization: Bearer <key>`, instead of X-API-Key.",
)


async def get_sessions(request: Request) -> SessionService:
    service: SessionService = request.app.state.sessions
    return service


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_owner(
    settings: Annotated[Settings, Depends(get_settings)],
    api_key: Annotated[str | None, Depends(_api_key)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The caller's identity (see :func:`owner_of`): the key from ``X-API-Key``, or else
    from ``Authorization: Bearer``."""
    return owner_of(settings, api_key or (bearer.credentials if bearer else None))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def owner_of(settings: Settings, api_key: str | None) -> str:
    """The caller's identity: the hash of its API key, or ``""`` when keys are off.

    With keys configured, a missing key is 401 and an unknown one 403. Sessions belong to
    the key that created them; another key sees 404.
    """
    if not settings.api_key_hashes:
        return ""
    if not api_key:
        raise problems.Unauthorized(
            "send your API key in the X-API-Key header (or as Authorization: Bearer)"
        )
    digest = hash_api_key(api_key)
    if not any(hmac.compare_digest(digest, known) for known in settings.api_key_hashes):
        raise problems.Forbidden("this API key is not accepted")
    return digest


SessionsDep = Annotated[SessionService, Depends(get_sessions)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
OwnerDep = Annotated[str, Depends(get_owner)]
