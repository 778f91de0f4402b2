"""The stores a service can keep its sessions in, by the name ``--store`` gives.

Adding a backend is a module with a :class:`~.base.Store` subclass that passes the store
contract (:mod:`.contract`), and one entry here: its name, how settings build it, and
whether several service processes may share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kameleon.service.store.base import Store

if TYPE_CHECKING:
    from kameleon.service.config import Settings

__all__ = ["STORES", "Backend", "build_store"]


@dataclass(frozen=True, slots=True)
class Backend:
    """A store backend.

    Attributes
    ----------
    name
        What ``--store`` (``KAMELEON_STORE``) calls it.
    build
        The store for the service's settings (imports its client library only then).
    shared
        Whether service processes share its sessions (``--workers`` > 1 needs it).
    description
        One line for the settings' documentation.
    """

    name: str
    build: Callable[[Settings], Store]
    shared: bool
    description: str


def _memory(settings: Settings) -> Store:
    from kameleon.service.store.memory_store import MemoryStore

    return MemoryStore()


def _redis(settings: Settings) -> Store:
    from kameleon.service.store.redis_store import RedisStore

    return RedisStore.from_url(
        settings.redis_url,
        prefix=settings.redis_prefix,
        ttl_seconds=settings.session_ttl_seconds,
        timeout=settings.store_timeout_seconds,
        max_connections=settings.store_max_connections,
    )


STORES: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("memory", _memory, False, "this process's memory (the default; lost on exit)"),
        Backend("redis", _redis, True, "Redis or a Redis Cluster at redis_url"),
    )
}


def build_store(settings: Settings) -> Store:
    """The store that ``settings`` names."""
    return STORES[settings.store].build(settings)
