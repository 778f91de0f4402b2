"""The trace of a long run: 64 chains x 100 000 draws answer in a small, quick page.

The draws are written straight into a memory store (stepping 6.4 million transitions
through the API would take minutes); the trace is then asked over HTTP, as the
dashboard asks it.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.sessions.rows import RowLayout
from kameleon.service.store.memory_store import MemoryStore

CHAINS, DRAWS, DIM = 64, 100_000, 4

pytestmark = pytest.mark.slow


def _fill(store: MemoryStore, session_id: str, rng: np.random.Generator) -> None:
    """Every chain gets DRAWS rows of a slowly mixing random walk."""
    session = store._get(session_id)
    for c in range(CHAINS):
        rows = np.zeros((DRAWS, RowLayout.width(DIM)))
        rows[:, RowLayout.POSITION :] = np.cumsum(rng.normal(size=(DRAWS, DIM)), axis=0) * 0.01
        session.draws[c] = bytearray(rows.astype("<f8").tobytes())
        session.chains[c] = dataclasses.replace(session.chains[c], draws=DRAWS)


def test_a_long_run_is_thinned_on_the_server() -> None:
    store = MemoryStore()
    with TestClient(create_app(Settings(), store=store)) as api:
        body = {"algorithm": "rwm", "dim": DIM, "chains": CHAINS, "warmup": 1000}
        sid = api.post("/v1/sessions", json=body).json()["id"]
        _fill(store, sid, np.random.default_rng(0))
        url = f"/v1/sessions/{sid}/trace?points=1000&include_warmup=true&checkpoints=40"

        started = time.perf_counter()
        first = api.get(url)
        cold = time.perf_counter() - started
        assert first.status_code == 200
        doc = first.json()
        assert doc["stride"] == 128  # 100 000 / 128 = 782 points, / 64 would be 1563
        assert [len(c["iterations"]) for c in doc["chains"]] == [782] * CHAINS
        assert doc["chains"][5]["iterations"][:3] == [1, 129, 257]
        assert len(first.content) < 8_000_000  # 64 x 782 x 5 numbers, not 64 x 100 000
        assert 20 <= len(doc["running"]["iterations"]) <= 40

        started = time.perf_counter()
        again = api.get(url, headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 304 and time.perf_counter() - started < 2.0

        # A poll after new draws: the checkpoints computed before are not computed again.
        session = store._get(sid)
        session.chains[0] = dataclasses.replace(session.chains[0], draws=DRAWS - 1)
        started = time.perf_counter()
        assert api.get(url).status_code == 200
        warm = time.perf_counter() - started
        assert warm < max(3.0, cold / 3), (cold, warm)
