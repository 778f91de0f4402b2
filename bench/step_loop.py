"""The service's step loop in process (the app behind a test client, the memory store):
seconds for ``STEPS`` steps of ``CHAINS`` chains, each telling every chain's result and
asking for the next (a standard normal in 4-d, no warm-up end). For comparing two
checkouts' service code side by side, with nothing but the code between them:

    for i in 1 2 3 4 5 6 7; do
      .venv/bin/python bench/step_loop.py 16 1000 rwm
      PYTHONPATH=/tmp/kameleon-before .venv/bin/python bench/step_loop.py 16 1000 rwm
    done
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
from fastapi.testclient import TestClient

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.store.memory_store import MemoryStore


def main() -> None:
    chains, steps = int(sys.argv[1]), int(sys.argv[2])
    algorithm = sys.argv[3] if len(sys.argv) > 3 else "rwm"
    warnings.filterwarnings("ignore")
    app = create_app(Settings(), store=MemoryStore())
    body = {"dim": 4, "algorithm": algorithm, "chains": chains, "warmup": 10**6, "seed": 1}
    with TestClient(app) as client:
        sid = client.post("/v1/sessions", json=body).json()["id"]
        out = client.post(f"/v1/sessions/{sid}/ask", json={"max": chains}).json()["proposals"]
        start = time.perf_counter()
        for _ in range(steps):
            results = [
                {"id": p["id"], "log_density": -0.5 * float(np.dot(p["x"], p["x"]))} for p in out
            ]
            answer = client.post(
                f"/v1/sessions/{sid}/step", json={"results": results, "max": chains}
            ).json()
            out = answer["proposals"]
        print(f"{time.perf_counter() - start:.3f}")


if __name__ == "__main__":
    main()
