"""The validation suite through the HTTP API, for one sampler on two cases: the service
gives the in-process draws bit for bit (so every number of the suite holds through it),
and its diagnostics raise the warnings that in-process ``sample()`` raises."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kameleon.core.running.inprocess import sample
from kameleon.core.validation.cases import cases
from kameleon.core.validation.suite import run_case

CASES = {case.name: case for case in cases()}
CHAINS, WARMUP, ITERATIONS, SEED = 4, 600, 600, 5


def _json(value: float) -> float | None:
    return None if value == -math.inf else value


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gaussian-rho-0.999-2d", "funnel-5d"])
def test_the_service_draws_and_warns_as_in_process(
    target: str, start_client: Callable[..., Any]
) -> None:
    case = CASES[target]
    client = start_client("memory")
    created = client.post(
        "/v1/sessions",
        json={
            "algorithm": "am",
            "dim": case.dim,
            "chains": CHAINS,
            "seed": SEED,
            "warmup": WARMUP,
            "max_iterations": WARMUP + ITERATIONS,
        },
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": CHAINS}).json()
    while answer["proposals"]:
        results = [
            {"id": p["id"], "log_density": _json(case.logdensity(np.asarray(p["x"])))}
            for p in answer["proposals"]
        ]
        response = client.post(f"/v1/sessions/{sid}/step", json={"results": results, "max": CHAINS})
        assert response.status_code == 200, response.text
        answer = response.json()
    served = np.load(io.BytesIO(client.get(f"/v1/sessions/{sid}/draws?format=npy").content))
    local = run_case(case, "am", chains=CHAINS, warmup=WARMUP, iterations=ITERATIONS, seed=SEED)
    expected = sample(
        case.logdensity,
        case.dim,
        algorithm="am",
        chains=CHAINS,
        warmup=WARMUP,
        iterations=ITERATIONS,
        seed=SEED,
        warn=False,
    )
    assert served.tobytes() == expected.tobytes()
    diagnostics = client.get(f"/v1/sessions/{sid}/diagnostics").json()
    codes = sorted({w["code"] for w in diagnostics["warnings"]})
    assert codes == local.warnings
    if case.hard:
        assert codes  # the funnel: the service says so too
