"""Schema-driven fuzzing of the live service, on both stores (schemathesis).

Requests generated from the OpenAPI document, valid and invalid, against a real
``kameleon serve`` process: no answer is a 5xx, and every answer has a status, content
type and body that the document declares.
The number of examples is bounded so that the run takes well under a minute; the
examples are the same every run (``derandomize``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
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
