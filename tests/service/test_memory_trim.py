"""The service gives the memory of deleted sessions back (service.memory): glibc's
malloc_trim after deletes, in a thread, at most once per interval, never raising."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kameleon.service import memory
from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.memory import Trimmer
from kameleon.service.store.memory_store import MemoryStore


class Calls:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.threads: list[threading.Thread] = []

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.threads.append(threading.current_thread())


def test_at_most_one_trim_per_interval_and_one_after_the_last_delete() -> None:
    calls = Calls()

    async def deletes() -> None:
        trimmer = Trimmer(trim=calls, interval=0.3)
        for _ in range(10):
            trimmer.freed()
        await asyncio.sleep(0.1)
        assert len(calls.times) == 1  # the first at once
        for _ in range(10):  # during the pause: one more, when it ends
            trimmer.freed()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        await trimmer.close()

    asyncio.run(deletes())
    assert len(calls.times) == 2
    assert calls.times[1] - calls.times[0] >= 0.29
    assert all(t is not threading.main_thread() for t in calls.threads)  # off the loop


def test_the_pause_runs_from_when_a_trim_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a trim's thread may start well after it was scheduled; the
    next trim still waits a whole pause from when the last one began (here the first
    trim's thread is held 0.15 s, half the pause: measured from its scheduling, the
    second trim came 0.15 s after the first)."""
    calls = Calls()
    to_thread = asyncio.to_thread
    held = [0.15]

    async def late(fn: Any, *args: Any) -> Any:
        if held:
            await asyncio.sleep(held.pop())
        return await to_thread(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", late)

    async def deletes() -> None:
        trimmer = Trimmer(trim=calls, interval=0.3)
        trimmer.freed()
        await asyncio.sleep(0.2)
        trimmer.freed()
        await asyncio.sleep(0.6)
        await trimmer.close()

    asyncio.run(deletes())
    assert len(calls.times) == 2
    assert calls.times[1] - calls.times[0] >= 0.29


def test_a_slow_trim_is_not_run_twice_at_once() -> None:
    running = threading.Event()
    release = threading.Event()
    calls = Calls()

    def slow() -> None:
        calls()
        running.set()
        release.wait(5)

    async def deletes() -> None:
        trimmer = Trimmer(trim=slow, interval=0.05)
        trimmer.freed()
        await asyncio.to_thread(running.wait, 5)
        trimmer.freed()  # during the slow trim, and longer than the pause
        await asyncio.sleep(0.3)
        assert len(calls.times) == 1
        release.set()
        await asyncio.sleep(0.3)
        await trimmer.close()

    asyncio.run(deletes())
    assert len(calls.times) == 2


def test_a_trim_that_raises_raises_nowhere() -> None:
    def broken() -> None:
        raise OSError("no")

    async def deletes() -> int:
        trimmer = Trimmer(trim=broken, interval=0.0)
        trimmer.freed()
        await asyncio.sleep(0.1)
        trimmer.freed()
        await trimmer.close()
        return trimmer.trims

    assert asyncio.run(deletes()) == 0


def test_off_or_without_the_symbol_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls()
    off = Trimmer(False, trim=calls)
    assert not off.active
    off.freed()  # no event loop needed: nothing is scheduled

    class NoTrim:  # a C library without malloc_trim (musl, macOS)
        def __init__(self, name: str | None) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    assert memory.malloc_trim() is None
    missing = Trimmer()
    assert not missing.active
    missing.freed()
    assert calls.times == []


def test_a_delete_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(create_app(Settings(malloc_trim=True), store=MemoryStore())) as client:
        trimmer = client.app.state.sessions.memory  # type: ignore[attr-defined]
        calls = Calls()
        monkeypatch.setattr(trimmer, "trim", calls)
        sid = client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 2}).json()["id"]
        assert calls.times == []
        assert client.delete(f"/v1/sessions/{sid}").status_code == 204
        deadline = time.monotonic() + 5
        while not calls.times and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls.times) == 1
    with TestClient(create_app(Settings(malloc_trim=False), store=MemoryStore())) as client:
        assert not client.app.state.sessions.memory.active  # type: ignore[attr-defined]
