"""What the contract's tests share: the event loop they run on, the records and
updates they make, sessions created with or without a quota, and the marking that makes
each test of a contract module a coroutine for anyio's plugin and a name to import."""

from __future__ import annotations

from typing import Any

import pytest

from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainRecord, ChainUpdate, Quota

__all__ = [
    "QUOTA",
    "ROW",
    "anyio_backend",
    "create",
    "create_reserved",
    "record",
    "reserve",
    "update",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


ROW = 16  # bytes per draw row in these tests


def record(chain: int, state: bytes = b'{"s":0}', active: bool = True) -> ChainRecord:
    """A new chain's record, as a create stores it."""
    return ChainRecord(chain, 0, state, 0, 0.0, active, None, 0)


async def create(store: Store, sid: str = "s1", chains: int = 3, owner: str = "") -> None:
    """Reserve (no quota) and create session ``sid`` of ``chains`` chains."""
    meta = b'{"id": "%s", "owner": "%s", "chains": %d}' % (sid.encode(), owner.encode(), chains)
    records = [record(c) for c in range(chains)]
    colds = [b'{"cold": %d}' % c for c in range(chains)]
    assert await store.reserve(sid, owner, size=0, grant=0) == sid
    await store.create_session(sid, owner, meta, records, colds, warming=chains)


def update(chain: int, version: int, **kw: object) -> ChainUpdate:
    """An update of ``chain`` from ``version`` (a new state; ``kw`` sets the rest)."""
    fields: dict[str, object] = {"state": b'{"s":%d}' % (version + 1), "active": True}
    fields.update(kw)
    return ChainUpdate(chain, version, **fields)  # type: ignore[arg-type]


QUOTA = Quota(sessions=10, bytes=1000, total_bytes=10_000)


async def reserve(store: Store, sid: str, owner: str = "o", size: int = 10, **kw: Any) -> str:
    """Reserve ``size`` bytes for ``sid`` within :data:`QUOTA`."""
    return await store.reserve(sid, owner, size=size, grant=100, quota=QUOTA, **kw)


async def create_reserved(store: Store, sid: str, owner: str = "o", **kw: Any) -> str:
    """:func:`reserve`, then create the session if the reservation is its own."""
    got = await reserve(store, sid, owner, **kw)
    if got == sid:
        meta = b'{"id": "%s"}' % sid.encode()
        await store.create_session(sid, owner, meta, [record(0)], [b"{}"], warming=1)
    return got


def anyio_tests(namespace: dict[str, Any]) -> list[str]:
    """Mark every test of a contract module (``namespace``: its globals) as a coroutine
    for anyio's plugin; their names, for the module's ``__all__``."""
    names = [name for name in namespace if name.startswith("test_")]
    for name in names:
        namespace[name] = pytest.mark.anyio(namespace[name])
    return names
