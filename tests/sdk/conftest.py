"""Fixtures of the SDK tests: a real ``kameleon serve`` process to talk to."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers import KAMELEON, free_port, serving

#: Draws per page of the test service: small, so that reading draws takes several pages.
PAGE_SIZE = 200


def clean_env(**settings: str) -> dict[str, str]:
    """The environment of a test service: no KAMELEON_* setting of the caller's, these."""
    env = {k: "" for k in os.environ if k.startswith("KAMELEON_")}
    env.update({f"KAMELEON_{k.upper()}": v for k, v in settings.items()})
    return env


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """The URL of a service on the memory store, with a small draws page."""
    port = free_port()
    env = clean_env(draws_page_size=str(PAGE_SIZE))
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        yield url
