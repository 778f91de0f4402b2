"""Fixtures of the HTTP tests: the app on each store, behind a TestClient."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.store.base import Store
from kameleon.service.store.memory_store import MemoryStore

STORES = ("memory", "redis")

StartClient = Callable[..., TestClient]  # (store, settings=None)
MakeClient = Callable[..., TestClient]  # (settings=None)
ProblemCheck = Callable[[httpx.Response, int], dict[str, Any]]


def _redis_store(url: str, prefix: str) -> Store:
    from kameleon.service.store.redis_store import RedisStore

    # The tests of the service's behaviour wait longer for Redis than the default 2 s:
    # the server is shared with whatever else runs on the machine, and a busy moment
    # would answer 503 (correctly, and retry-safe) where these tests expect an answer.
    # The tests of timeouts and faults make stores of their own (test_redis_faults.py).
    return RedisStore.from_url(url, prefix=prefix, ttl_seconds=3600, timeout=10.0)


def _store(request: pytest.FixtureRequest, kind: str) -> Store:
    if kind == "memory":
        return MemoryStore()
    return _redis_store(
        request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    )


@contextmanager
def _started(store: Store, settings: Settings) -> Iterator[TestClient]:
    """A client of an app on ``store`` with its lifespan running; the store is closed on
    the app's own event loop before that loop stops."""
    app = create_app(settings, store=store)
    with TestClient(app, raise_server_exceptions=False) as client:
        try:
            yield client
        finally:
            assert client.portal is not None
            client.portal.call(store.close)


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    """The store under test; tests that use it run once per store."""
    kind: str = request.param
    return kind


@pytest.fixture
def start_client(request: pytest.FixtureRequest) -> Iterator[StartClient]:
    """``start_client(store, settings=None)``: a client of a started app on a new
    ``"memory"`` or ``"redis"`` store, with ``settings`` (default: the defaults).

    The Redis stores of one test share its key prefix, so they see each other's
    sessions. Every app is stopped after the test. Server errors come back as 500
    responses, not as exceptions.
    """
    with ExitStack() as stack:

        def start(store: str, settings: Settings | None = None) -> TestClient:
            app_store = _store(request, store)
            return stack.enter_context(_started(app_store, settings or Settings()))

        yield start


@pytest.fixture
def make_client(start_client: StartClient, store_kind: str) -> MakeClient:
    """``make_client(settings=None)``: a client of a started app on the store under test."""

    def make(settings: Settings | None = None) -> TestClient:
        return start_client(store_kind, settings)

    return make


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    """A client of an app with default settings, on each store in turn."""
    return make_client()


@pytest.fixture(scope="module", params=STORES)
def module_client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """One app with default settings for all the tests of a module, on each store in
    turn. Cheaper than ``client``; for tests that leave its sessions as they found them.
    """
    if request.param == "memory":
        with _started(MemoryStore(), Settings()) as client:
            yield client
        return
    import redis

    url = request.getfixturevalue("redis_url")
    prefix = f"kameleon-test-{uuid.uuid4().hex[:12]}"
    try:
        with _started(_redis_store(url, prefix), Settings()) as client:
            yield client
    finally:
        with redis.Redis.from_url(url) as cleaner:
            keys = list(cleaner.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                cleaner.delete(*keys)


def _assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status, problem
    for key in ("type", "title", "detail"):
        assert isinstance(problem[key], str) and problem[key], problem
    return problem


@pytest.fixture
def assert_problem() -> ProblemCheck:
    """``assert_problem(response, status)``: check that ``response`` is RFC 9457 problem
    details (``application/problem+json`` with ``type``, ``title``, ``status`` and
    ``detail``) with ``status``, and return its body."""
    return _assert_problem
