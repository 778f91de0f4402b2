"""The store contract: what every :class:`~kameleon.service.store.base.Store` must do,
as pytest tests that a backend's own test module runs against its store.

A new backend's tests need only a ``store`` fixture that yields a fresh store (each
test creates its own sessions, named ``s1``, ``a``, ...), and this module's tests::

    from kameleon.service.store.contract import *  # noqa: F403

    @pytest.fixture
    async def store() -> AsyncIterator[Store]:
        the_store = MyStore(...)
        yield the_store
        await the_store.close()

The tests are coroutines run by anyio's pytest plugin (the ``anyio_backend`` fixture
below picks asyncio). Each uses only the :class:`Store` interface, so a backend passes
them or has a defect; ``tests/service/test_store_contract.py`` runs them on the memory
store, Redis and a Redis Cluster.
"""

from __future__ import annotations

from kameleon.service.store.contract import common, quotas, sessions
from kameleon.service.store.contract.common import *  # noqa: F403
from kameleon.service.store.contract.quotas import *  # noqa: F403
from kameleon.service.store.contract.sessions import *  # noqa: F403

__all__ = [*common.__all__, *sessions.__all__, *quotas.__all__]
