"""Typed dependencies of the routes.

All are ``async def``: FastAPI runs a plain ``def`` dependency in a thread pool, and the
hop costs more than everything else a ``step`` does.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from service import errors
from service.config import Settings, hash_api_key
from service.sessions import SessionService

__all__ = ["API_KEY_HEADER", "OwnerDep", "SessionsDep", "SettingsDep", "owner_of"]

API_KEY_HEADER = "X-API-Key"
_api_key = APIKeyHeader(
    name=API_KEY_HEADER, auto_error=False, description="Required when keys are configured."
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
) -> str:
    """The caller's identity (see :func:`owner_of`)."""
    return owner_of(settings, api_key)


def owner_of(settings: Settings, api_key: str | None) -> str:
    """The caller's identity: the hash of its API key, or ``""`` when keys are off.

    With keys configured, a missing key is 401 and an unknown one 403. Sessions belong to
    the key that created them; another key sees 404.
    """
    if not settings.api_key_hashes:
        return ""
    if not api_key:
        raise errors.Unauthorized("send your API key in the X-API-Key header")
    digest = hash_api_key(api_key)
    if not any(hmac.compare_digest(digest, known) for known in settings.api_key_hashes):
        raise errors.Forbidden("this API key is not accepted")
    return digest


SessionsDep = Annotated[SessionService, Depends(get_sessions)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
OwnerDep = Annotated[str, Depends(get_owner)]
