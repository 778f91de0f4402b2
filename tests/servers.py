"""Run ``kameleon serve`` as a real process for a test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

__all__ = ["KAMELEON", "free_port", "serving", "wait_for_health"]

KAMELEON = str(Path(sys.executable).with_name("kameleon"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_health(
    url: str, proc: subprocess.Popen[Any], output: Callable[[], str] = lambda: ""
) -> None:
    """Until ``url``'s ``/v1/health`` answers (200, or 503: up, its store not ready);
    fails at once if ``proc`` exits, and after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(url + "/v1/health", timeout=1).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.args} did not answer health")
        time.sleep(0.1)


@contextmanager
def serving(
    argv: list[str],
    env: Mapping[str, str],
    port: int,
    *,
    log: Path | None = None,
    inherit_environment: bool = True,
) -> Iterator[str]:
    """Run ``argv`` until its ``/v1/health`` answers; yield the base URL; stop it.

    ``env`` is added to this process's environment (or replaces it, without
    ``inherit_environment``); the output goes to ``log`` when given, else to a temporary
    file (a pipe that nobody reads would block a chatty server, and leak its handle).
    """
    environment = {**os.environ, **env} if inherit_environment else dict(env)
    with ExitStack() as stack:
        if log is not None:
            out = stack.enter_context(log.open("w"))
        else:
            out = stack.enter_context(tempfile.TemporaryFile("w+"))
        proc = subprocess.Popen(argv, env=environment, stdout=out, stderr=subprocess.STDOUT)

        def output() -> str:
            if log is not None:
                return log.read_text()
            out.seek(0)
            return str(out.read())

        url = f"http://127.0.0.1:{port}"
        try:
            wait_for_health(url, proc, output)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
