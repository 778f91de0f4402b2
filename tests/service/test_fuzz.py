"""Schema-driven fuzzing of the live service, on both stores (schemathesis).

Requests generated from the OpenAPI document, valid and invalid, against a real
``kameleon serve`` process: no answer is a 5xx, and every answer has a status, content
type and body that the document declares. And sessions told values that drive
adaptation to overflow (flat or increasing log densities, values near the float range):
no answer is a 5xx, and the session runs to its end and still answers.
The number of examples is bounded so that the run takes well under a minute; the
examples are the same every run (``derandomize``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.servers import KAMELEON, free_port, serving

pytestmark = pytest.mark.slow

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module", params=["memory", "redis"])
def base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    env = {"KAMELEON_STORE": request.param}
    if request.param == "redis":
        env["KAMELEON_REDIS_URL"] = request.getfixturevalue("redis_url")
        env["KAMELEON_REDIS_PREFIX"] = "fuzz"
    port = free_port()
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        yield url


def test_no_generated_request_breaks_the_contract(base_url: str) -> None:
    schema = schemathesis.openapi.from_url(base_url + "/v1/openapi.json")
    failures: list[str] = []
    calls = [0]
    for operation, mode in itertools.product(schema.get_all_operations(), GenerationMode):
        op = operation.ok()

        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(mode))
        def run(case: schemathesis.Case) -> None:
            calls[0] += 1
            case.call_and_validate(base_url=base_url, checks=CHECKS)

        try:
            run()
        except Unsatisfiable:
            continue  # nothing invalid to send: an operation without parameters or body
        except Exception as exc:  # collect every operation's failure, then report
            failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
    assert calls[0] > 300  # every operation was exercised, with valid and invalid input


BIG = 1.7e308
#: A told value by pattern, from the proposal and a value drawn for the example. Flat and
#: increasing values make every proposal accepted, which widens the adapted proposal at
#: every window: before the guards, adaptive Metropolis overflowed within 200 iterations.
PATTERNS = {
    "flat": lambda p, v: 0.0,
    "increasing": lambda p, v: float(p["iteration"]),
    "huge increasing": lambda p, v: min(BIG, 1e300 * (p["iteration"] + 1)),
    "unbounded in x": lambda p, v: max(-BIG, min(BIG, 1e300 * math.tanh(p["x"][0]))),
    "drawn": lambda p, v: v,
}
TOLD = st.one_of(
    st.sampled_from([0.0, BIG, -BIG, 1e300, -1e300, None]),
    st.floats(allow_nan=False, allow_infinity=False),
)
#: Options that make adaptation act soon (am: its covariance estimate from 2 states on).
FAST = {"am": {"adapt_start": 2}}


def test_told_values_that_drive_adaptation_to_overflow_never_break_a_session(
    module_client: TestClient,
) -> None:
    client = module_client

    @settings(
        max_examples=10,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        algorithm=st.sampled_from(["am", "kameleon", "kmc-finite", "kmc-lite", "rwm"]),
        dim=st.integers(1, 3),
        pattern=st.sampled_from(sorted(PATTERNS)),
        values=st.lists(TOLD, min_size=1, max_size=8),
        start=st.sampled_from([None, 1e300, -BIG]),
    )
    def run(
        algorithm: str, dim: int, pattern: str, values: list[float | None], start: float | None
    ) -> None:
        body: dict[str, Any] = {
            "algorithm": algorithm,
            "dim": dim,
            "chains": 2,
            "seed": 7,
            "warmup": 200,
            "max_iterations": 230,
            "options": FAST.get(algorithm, {}),
        }
        if start is not None:
            body["initial"] = [[start] * dim]
        created = client.post("/v1/sessions", json=body)
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        told = PATTERNS[pattern]
        answer = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()
        for n in itertools.count():
            if answer["done"] or n > 2 * 231:
                break
            results = []
            for k, p in enumerate(answer["proposals"]):
                value = told(p, values[(n + k) % len(values)])
                if p["kind"] == "init" and value is None:
                    value = 0.0  # a start outside the support would wait for a reset
                results.append({"id": p["id"], "log_density": value})
            step = {"results": results, "max": 2, "request_id": f"fuzz-{n}"}
            response = client.post(f"/v1/sessions/{sid}/step", json=step)
            for _ in range(5):  # the store did not answer in time (a loaded machine): retry
                if response.status_code != 503:
                    break
                response = client.post(f"/v1/sessions/{sid}/step", json=step)
            assert response.status_code < 500, response.text
            assert response.status_code == 200, response.text
            answer = response.json()
        # The session ran to its end, and still answers.
        assert answer["done"]
        summary = client.get(f"/v1/sessions/{sid}")
        assert summary.status_code == 200, summary.text
        assert summary.json()["stopped_by"] == "max_iterations"
        again = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2})
        assert again.status_code == 200 and again.json()["done"], again.text
        for path in ("diagnostics", "draws"):
            response = client.get(f"/v1/sessions/{sid}/{path}")
            assert response.status_code == 200, response.text
        client.delete(f"/v1/sessions/{sid}")

    run()
