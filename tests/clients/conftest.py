"""The service as a real process (memory store, loopback) for the clients to talk to."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers import KAMELEON, free_port, serving


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    port = free_port()
    env = {k: "" for k in os.environ if k.startswith("KAMELEON_")}
    env["KAMELEON_STORE"] = "memory"
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        yield url
