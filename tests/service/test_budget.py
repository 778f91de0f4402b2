"""Memory budgets: a session is sized before it is made, and refused when too big.

DESIGN: a request must not be able to make the process allocate gigabytes. The estimate
(:mod:`kameleon.service.sessions.budget`) must bound what a chain really keeps, so the
tests compare it with the size of real chains' stored states, each sampler's largest
arrays filled (small subsamples, so that they fill within the run).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi.testclient import TestClient

from kameleon.core import SAMPLERS
from kameleon.service.config import Settings
from kameleon.service.schemas import SessionCreate, TellResult
from kameleon.service.sessions import SessionService
from kameleon.service.sessions.budget import chain_bytes, describe
from kameleon.service.store.memory_store import MemoryStore
from tests.service.conftest import ProblemCheck

# Small subsamples, so that a 400-iteration run fills them.
FILLED = {
    "rwm": {},
    "am": {},
    "kameleon": {"subsample_size": 50},
    "kmc-lite": {"num_centres": 50, "update_every": 20, "min_history": 20},
    "kmc-finite": {"num_features": 50},
    "mala": {"metric": "dense"},
    "hmc": {"metric": "dense"},
    "nuts": {"metric": "dense"},
    "sgld": {"data_size": 100},  # required; a minibatch of 100, the default's largest
    "importance": {},
    "gibbs": {},  # one block per coordinate: the most records of told values
    "ensemble": {},
    "tempering": {},  # fixed-size arrays: every rung's state, window sums and factor
    "smc": {},  # fixed-size arrays: the population, its values and weights, the factor
}


async def _stored_bytes(algorithm: str, dim: int) -> tuple[int, int]:
    """The stored size of a chain after 400 iterations, and its estimate."""
    sessions = SessionService(MemoryStore(), Settings())
    body = SessionCreate(
        algorithm=algorithm, dim=dim, chains=1, seed=1, warmup=200, options=FILLED[algorithm]
    )
    sid = (await sessions.create(body, ""))["id"]
    proposals = (await sessions.ask(sid, "", 1, None))["proposals"]
    for _ in range(400):
        results = [  # in parts, a model whose log prior is the target: the value and the
            # gradient are the same for every sampler (a sampler without gradients
            # ignores them; the likelihood's gradient is 0)
            TellResult(
                id=p["id"],
                log_density=-0.5 * sum(v * v for v in p["x"]),
                gradient=[0.0] * dim,
                log_prior=-0.5 * sum(v * v for v in p["x"]),
                log_likelihood=0.0,
                prior_gradient=[-v for v in p["x"]],
            )
            for p in proposals
        ]
        proposals = (await sessions.step(sid, "", results, 1, None))["proposals"]
    (record,) = await sessions.store.load_chains(sid, [0])
    _, cold = await sessions.store.load_cold(sid, 0)
    meta = await sessions.meta(sid, "")
    return len(record.state) + len(cold), chain_bytes(algorithm, dim, meta.params)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(SAMPLERS))
@pytest.mark.parametrize("dim", [2, 30])
def test_the_estimate_bounds_a_real_chain(algorithm: str, dim: int) -> None:
    stored, estimate = asyncio.run(_stored_bytes(algorithm, dim))
    assert stored <= estimate, (stored, estimate)


def test_a_huge_session_is_refused_at_once_with_its_size(
    module_client: TestClient, assert_problem: ProblemCheck
) -> None:
    started = time.monotonic()
    response = module_client.post("/v1/sessions", json={"algorithm": "am", "dim": 8966})
    assert time.monotonic() - started < 2  # nothing was allocated
    problem = assert_problem(response, 422)
    assert problem["bytes"] > problem["limit"] == Settings().max_session_bytes
    assert describe(problem["bytes"]) in problem["detail"]  # "about 7.7 GB"
    assert problem["errors"][0]["field"] == "dim"
    # Draws count when the session says how long it runs.
    long = {"algorithm": "rwm", "dim": 100, "chains": 64, "max_iterations": 10_000_000}
    assert_problem(module_client.post("/v1/sessions", json=long), 422)


def test_a_key_has_a_quota_of_sessions_and_of_memory(
    make_client: object, assert_problem: ProblemCheck
) -> None:
    client: TestClient = make_client(Settings(max_sessions_per_key=2))  # type: ignore[operator]
    body = {"algorithm": "rwm", "dim": 2, "chains": 1, "max_iterations": None}
    first = client.post("/v1/sessions", json=body).json()["id"]
    assert client.post("/v1/sessions", json=body).status_code == 201
    problem = assert_problem(client.post("/v1/sessions", json=body), 429)
    assert problem["sessions"] == 2 and problem["limit"] == 2
    assert client.delete(f"/v1/sessions/{first}").status_code == 204
    assert client.post("/v1/sessions", json=body).status_code == 201

    # About 8.7 MB each for the state, and 4.2 MB for the first 1 730 draws (an
    # open-ended session reserves its draws a step at a time: budget.grant_step); on
    # Redis the rwm sessions above, which share the test's store, hold 4.2 MB each.
    am = {"algorithm": "am", "dim": 300, "chains": 1, "max_iterations": None}
    roomy: TestClient = make_client(Settings(max_bytes_per_key=36_000_000))  # type: ignore[operator]
    assert roomy.post("/v1/sessions", json=am).status_code == 201
    assert roomy.post("/v1/sessions", json=am).status_code == 201
    problem = assert_problem(roomy.post("/v1/sessions", json=am), 429)
    assert problem["bytes"] > problem["limit"] == 36_000_000


def test_the_largest_allowed_session_grows_the_process_by_about_its_estimate() -> None:
    """Real memory, measured: the largest AM session a 64 MiB budget allows, created
    and asked once (which factors its covariance), grows the process's resident size
    by no more than the budget plus 32 MiB of slack (allocator and interpreter noise),
    and the next size up is refused."""
    import psutil

    from kameleon.service.app import create_app

    budget = 64 * 2**20

    def need(d: int) -> int:
        params = SAMPLERS["am"].make_params(d, {}, warmup=0)
        return chain_bytes("am", d, params)

    dim = max(d for d in range(100, 3000, 10) if need(d) <= budget)
    process = psutil.Process()
    with TestClient(create_app(Settings(max_session_bytes=budget), store=MemoryStore())) as c:
        before = process.memory_info().rss
        created = c.post(
            "/v1/sessions",
            json={"algorithm": "am", "dim": dim, "chains": 1, "max_iterations": None},
        )
        assert created.status_code == 201, created.text
        c.post(f"/v1/sessions/{created.json()['id']}/ask", json={})
        grown = process.memory_info().rss - before
        refused = c.post(
            "/v1/sessions",
            json={"algorithm": "am", "dim": dim + 50, "chains": 1, "max_iterations": None},
        )
        assert refused.status_code == 422
    assert grown <= budget + 32 * 2**20, (dim, grown)
