"""The ask/tell protocol over HTTP (PROTOCOL.md), on the memory and the Redis store.

The client side of every test holds the target: a standard normal log density evaluated
at the points the service hands out. Everything is deterministic (fixed seeds), so the
statistical checks are fixed numbers with generous, stated tolerances.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urljoin

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.service.config import Settings, hash_api_key
from kameleon.service.schemas import ALGORITHMS
from tests.core.evaluations import numeric_gradient

Json = dict[str, Any]
LogDensity = Callable[[list[float]], float]
ClientFactory = Callable[..., TestClient]

ProblemCheck = Callable[[httpx.Response, int], Json]


def gaussian(x: list[float]) -> float:
    """Log density of the standard normal, up to a constant."""
    return -0.5 * math.fsum(v * v for v in x)


def create(client: TestClient, **fields: Any) -> Json:
    """Create a session (a 2-d rwm with 2 chains unless told otherwise); its summary."""
    body = {"algorithm": "rwm", "dim": 2, "chains": 2, "seed": 11, "warmup": 5, **fields}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    summary: Json = response.json()
    return summary


def ask(client: TestClient, sid: str, **body: Any) -> Json:
    response = client.post(f"/v1/sessions/{sid}/ask", json=body)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def tell(client: TestClient, sid: str, *results: tuple[str, Any]) -> httpx.Response:
    body = {"results": [{"id": pid, "log_density": value} for pid, value in results]}
    response: httpx.Response = client.post(f"/v1/sessions/{sid}/tell", json=body)
    return response


def tell_text(client: TestClient, sid: str, results: str) -> httpx.Response:
    """Tell results written as JSON text, to spell values as clients may: ``-Infinity``."""
    body = f'{{"results": [{results}]}}'
    headers = {"content-type": "application/json"}
    response: httpx.Response = client.post(
        f"/v1/sessions/{sid}/tell", content=body, headers=headers
    )
    return response


def step(client: TestClient, sid: str, *results: tuple[Any, ...], **body: Any) -> Json:
    """A step telling ``(id, log density)`` or ``(id, log density, gradient)`` results,
    or ``(id, log density, gradient, fields)`` with more fields (``sgld``'s parts)."""
    told = [
        {
            "id": r[0],
            "log_density": r[1],
            **({"gradient": r[2]} if len(r) > 2 else {}),
            **(r[3] if len(r) > 3 else {}),
        }
        for r in results
    ]
    response = client.post(f"/v1/sessions/{sid}/step", json={"results": told, **body})
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def outcomes(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [r["outcome"] for r in response.json()["results"]]


def summary(client: TestClient, sid: str) -> Json:
    response = client.get(f"/v1/sessions/{sid}")
    assert response.status_code == 200, response.text
    body: Json = response.json()
    return body


def draws(client: TestClient, sid: str, **query: Any) -> Json:
    response = client.get(f"/v1/sessions/{sid}/draws", params=query)
    assert response.status_code == 200, response.text
    body: Json = response.json()
    return body


def snapshot(client: TestClient, sid: str) -> tuple[Json, Json]:
    """Everything a tell can change: the summary and every draw."""
    return summary(client, sid), draws(client, sid, include_warmup="true")


def run(client: TestClient, sid: str, transitions: int, logp: LogDensity = gaussian) -> list[Json]:
    """Evaluate ``logp`` at every proposal of every free chain, step by step, until each
    chain has made ``transitions`` transitions or the session is done.

    Returns every proposal told, with its ``log_density`` and ``outcome`` added.
    Proposals beyond ``transitions`` stay leased and untold.
    """
    chains = summary(client, sid)["chains"]
    proposals = ask(client, sid, max=chains)["proposals"]
    told: list[Json] = []
    while True:
        batch = [
            {**p, "log_density": logp(p["x"])} for p in proposals if p["iteration"] <= transitions
        ]
        if not batch:
            return told
        # With the gradient, which only the samplers that use one read; for sgld (a
        # proposal with a minibatch), a model of one datum whose log prior is the target.
        answer = step(client, sid, *[_told(logp, p) for p in batch])
        for p, result in zip(batch, answer["results"], strict=True):
            assert result["id"] == p["id"]
            told.append({**p, "outcome": result["outcome"]})
        proposals = answer["proposals"]


def _told(logp: LogDensity, p: Json) -> tuple[Any, ...]:
    """A result of ``run``: ``(id, log density, gradient)``, or for a proposal with a
    minibatch (``sgld``, ``data_size`` 1) the target as the log prior, and a log
    likelihood of 0."""
    gradient = _gradient(logp, p["x"])
    if p.get("minibatch") is None:
        return p["id"], p["log_density"], gradient
    parts = {"log_prior": p["log_density"], "log_likelihood": 0.0, "prior_gradient": gradient}
    return p["id"], p["log_density"], [0.0] * len(gradient), parts


def _gradient(logp: LogDensity, x: list[float]) -> list[float]:
    """Central differences of ``logp`` at ``x`` (zeros where it is not a number)."""
    try:
        return numeric_gradient(lambda y: float(logp(list(y))), np.array(x)).tolist()
    except (TypeError, ValueError):
        return [0.0] * len(x)


def lease_end(proposal: Json) -> float:
    return datetime.fromisoformat(proposal["lease_expires_at"].replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------- sessions


def test_create_answers_201_with_location_and_resolved_summary(client: TestClient) -> None:
    response = client.post(
        "/v1/sessions",
        json={
            "algorithm": "rwm",
            "dim": 3,
            "chains": 4,
            "seed": 5,
            "warmup": 10,
            "max_iterations": 50,
            "options": {"target_acceptance": 0.3},
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/sessions/{body['id']}"
    assert body["algorithm"] == "rwm"
    assert (body["dim"], body["chains"], body["seed"], body["warmup"]) == (3, 4, 5, 10)
    assert body["max_iterations"] == 50
    assert body["pseudo_marginal"] is False
    assert body["param_names"] == ["x0", "x1", "x2"]
    # Every option, defaults included; the one given is as given.
    assert body["options"] == {
        "scale": None,
        "adapt_scale": True,
        "target_acceptance": 0.3,
        "adaptation": "warmup",
    }
    assert body["status"] == "warmup"
    assert (body["iterations"], body["evaluations"], body["acceptance_rate"]) == (0, 0, None)
    assert [c["chain"] for c in body["chain_summaries"]] == [0, 1, 2, 3]
    for chain in body["chain_summaries"]:
        assert chain["status"] == "initial"
        assert (chain["iterations"], chain["evaluations"], chain["resets"]) == (0, 0, 0)
        assert chain["acceptance_rate"] is None
    assert client.get(response.headers["location"]).json() == body


def test_list_is_paged_oldest_first(client: TestClient) -> None:
    ids = [create(client)["id"] for _ in range(3)]
    first = client.get("/v1/sessions", params={"limit": 2}).json()
    assert [s["id"] for s in first["sessions"]] == ids[:2]
    assert first["next"] is not None
    second = client.get("/v1/sessions", params={"limit": 2, "cursor": first["next"]}).json()
    assert [s["id"] for s in second["sessions"]] == ids[2:]
    assert second["next"] is None
    assert second["sessions"][0] == summary(client, ids[2])


def test_delete_removes_the_session_and_its_draws(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client)["id"]
    run(client, sid, 3)
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    base = f"/v1/sessions/{sid}"
    assert_problem(client.get(base), 404)
    assert_problem(client.post(f"{base}/ask", json={}), 404)
    assert_problem(tell(client, sid, ("c0.i4", -1.0)), 404)
    assert_problem(client.post(f"{base}/step", json={"results": []}), 404)
    assert_problem(client.get(f"{base}/draws"), 404)
    assert_problem(client.get(f"{base}/diagnostics"), 404)
    assert client.delete(base).status_code == 204  # safe to retry
    assert_problem(client.delete("/v1/sessions/0123456789abcdef01234567"), 404)
    assert sid not in [s["id"] for s in client.get("/v1/sessions").json()["sessions"]]


def test_health_reports_the_store_ready(client: TestClient, store_kind: str) -> None:
    response = client.get("/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["store"], body["store_ready"]) == ("ok", store_kind, True)


# -------------------------------------------------------------------------------- ask


def test_ask_hands_out_initial_points_first(client: TestClient) -> None:
    shared = create(client, chains=3, initial=[[1.5, -2.0]])["id"]
    proposals = ask(client, shared, max=3)["proposals"]
    assert [(p["id"], p["chain"], p["iteration"]) for p in proposals] == [
        ("c0.i0", 0, 0),
        ("c1.i0", 1, 0),
        ("c2.i0", 2, 0),
    ]
    assert all(p["kind"] == "init" and p["x"] == [1.5, -2.0] for p in proposals)

    rows = [[0.0, 1.0], [2.0, 3.0], [-4.0, 5.5]]
    own = create(client, chains=3, initial=rows)["id"]
    proposals = ask(client, own, max=3)["proposals"]
    assert [p["x"] for p in proposals] == rows
    assert all(p["kind"] == "init" for p in proposals)


def test_ask_gives_at_most_max_and_one_proposal_per_chain(client: TestClient) -> None:
    sid = create(client, chains=3)["id"]
    first = ask(client, sid, max=2)
    assert len(first["proposals"]) == 2
    assert first["done"] is False
    rest = ask(client, sid, max=10)["proposals"]
    assert len(rest) == 1  # the one chain without a live lease
    chains = sorted(p["chain"] for p in first["proposals"] + rest)
    assert chains == [0, 1, 2]
    # Every chain has its proposal leased: nothing more to hand out.
    again = ask(client, sid, max=10)
    assert again["proposals"] == []
    assert again["done"] is False


def test_expired_lease_hands_out_the_same_proposal_again(client: TestClient) -> None:
    sid = create(client, chains=2)["id"]
    ask(client, sid, max=1)  # c0.i0
    lease = 0.5
    # c0's next proposal (a told chain first) and c1's initial point, both on a short lease.
    leased = step(client, sid, ("c0.i0", -1.0), max=2, lease_seconds=lease)["proposals"]
    assert sorted((p["id"], p["kind"]) for p in leased) == [
        ("c0.i1", "proposal"),
        ("c1.i0", "init"),
    ]
    assert ask(client, sid, max=2)["proposals"] == []  # live leases: nothing to hand out
    time.sleep(max(0.0, max(lease_end(p) for p in leased) - time.time()) + 0.1)
    again = ask(client, sid, max=2)["proposals"]
    assert sorted((p["id"], p["x"]) for p in again) == sorted((p["id"], p["x"]) for p in leased)
    assert min(lease_end(p) for p in again) > max(lease_end(p) for p in leased)


def test_ask_status_is_the_session_status(client: TestClient) -> None:
    # No warm-up at all: the session samples from its first proposal on.
    sid = create(client, chains=1, warmup=0)["id"]
    assert summary(client, sid)["status"] == "sampling"
    assert ask(client, sid)["status"] == "sampling"

    # Chain 0 is past its warm-up, chain 1 is not: the session is still warming up,
    # whichever chain's proposal one ask hands out.
    sid = create(client, chains=2, warmup=1)["id"]
    ask(client, sid, max=2)
    step(client, sid, ("c0.i0", -1.0), max=1)
    assert outcomes(tell(client, sid, ("c0.i1", -1.0))) in (["accepted"], ["rejected"])
    assert summary(client, sid)["status"] == "warmup"
    answer = ask(client, sid, max=1)
    assert [p["id"] for p in answer["proposals"]] == ["c0.i2"]
    assert answer["status"] == "warmup"


# ------------------------------------------------------------------------------- tell


def test_tell_outcomes_and_retries(client: TestClient) -> None:
    sid = create(client, chains=1, initial=[[0.5, 0.5]])["id"]
    ask(client, sid)
    assert outcomes(tell(client, sid, ("c0.i0", -10.0))) == ["initialized"]
    assert outcomes(tell(client, sid, ("c0.i0", -10.0))) == ["duplicate"]

    (p1,) = ask(client, sid)["proposals"]
    assert (p1["id"], p1["kind"]) == ("c0.i1", "proposal")
    # Up from -10 is always accepted; -inf is always rejected.
    assert outcomes(tell(client, sid, ("c0.i1", 0.0))) == ["accepted"]
    (p2,) = ask(client, sid)["proposals"]
    assert outcomes(tell(client, sid, ("c0.i2", None))) == ["rejected"]
    # Retries, with -inf spelt any of its ways, change nothing.
    before = snapshot(client, sid)
    spellings = [
        ("c0.i0", "-10.0"),
        ("c0.i1", "0.0"),
        ("c0.i2", '"-inf"'),
        ("c0.i2", "-Infinity"),
        ("c0.i2", '"-Infinity"'),
    ]
    retries = ", ".join(f'{{"id": "{pid}", "log_density": {value}}}' for pid, value in spellings)
    assert outcomes(tell_text(client, sid, retries)) == ["duplicate"] * 5
    assert snapshot(client, sid) == before
    # The same id twice in one batch: applied once, then a duplicate.
    (p3,) = ask(client, sid)["proposals"]
    assert outcomes(tell(client, sid, ("c0.i3", -1.0), ("c0.i3", -1.0)))[1] == "duplicate"
    chain = summary(client, sid)["chain_summaries"][0]
    assert (chain["iterations"], chain["evaluations"]) == (3, 4)
    rows = draws(client, sid, include_warmup="true")["chains"][0]
    assert rows["draws"][:2] == [p1["x"], p1["x"]]  # accepted, then kept on a rejection
    assert rows["log_density"][:2] == [0.0, 0.0]
    assert p2["x"] != p1["x"] and p3["iteration"] == 3


def test_a_different_value_for_an_applied_id_is_409_and_the_first_stands(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client, chains=1)["id"]
    ask(client, sid)
    tell(client, sid, ("c0.i0", -10.0))
    ask(client, sid)
    assert outcomes(tell(client, sid, ("c0.i1", 0.0))) == ["accepted"]
    before = snapshot(client, sid)
    assert_problem(tell(client, sid, ("c0.i1", -50.0)), 409)
    assert_problem(tell(client, sid, ("c0.i0", -9.0)), 409)
    assert snapshot(client, sid) == before
    assert before[1]["chains"][0]["log_density"] == [0.0]


@pytest.mark.parametrize(
    "pid",
    [
        "c0.i5",  # a future iteration
        "c1.i1",  # a chain whose initial point is not told yet
        "c2.i0",  # no chain 2
        "c7.i3",
        "c0.e1.i0",  # an epoch that never was
    ],
)
def test_an_id_never_issued_is_409(
    client: TestClient, assert_problem: ProblemCheck, pid: str
) -> None:
    sid = create(client, chains=2)["id"]
    ask(client, sid, max=2)
    tell(client, sid, ("c0.i0", -1.0))
    before = snapshot(client, sid)
    assert_problem(tell(client, sid, (pid, -1.0)), 409)
    assert snapshot(client, sid) == before


# ---------------------------------------------------------------- initial points, reset


@pytest.mark.parametrize("outside", ["-Infinity", "null", '"-inf"', '"-Infinity"'])
def test_a_given_initial_point_outside_the_support_waits_for_a_reset(
    client: TestClient, assert_problem: ProblemCheck, outside: str
) -> None:
    sid = create(client, chains=2, initial=[[0.5, 0.5]])["id"]
    assert [p["x"] for p in ask(client, sid, max=2)["proposals"]] == [[0.5, 0.5]] * 2
    response = tell_text(client, sid, f'{{"id": "c0.i0", "log_density": {outside}}}')
    assert response.json()["results"] == [{"id": "c0.i0", "chain": 0, "outcome": "outside_support"}]
    assert outcomes(tell(client, sid, ("c0.i0", None))) == ["duplicate"]
    assert_problem(tell(client, sid, ("c0.i0", -1.0)), 409)
    session = summary(client, sid)
    chain0 = session["chain_summaries"][0]
    assert chain0["status"] == "needs_initial_point"
    assert session["status"] == "needs_initial_point"
    assert chain0["evaluations"] == 1
    tell(client, sid, ("c1.i0", -1.0))
    answer = ask(client, sid, max=2)
    assert [p["chain"] for p in answer["proposals"]] == [1]
    assert (answer["status"], answer["done"]) == ("needs_initial_point", False)

    response = client.post(f"/v1/sessions/{sid}/chains/0/reset", json={"initial": [0.25, -1.0]})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "initial"
    assert response.json()["resets"] == 1
    (init,) = ask(client, sid, max=2)["proposals"]
    assert (init["chain"], init["kind"], init["x"]) == (0, "init", [0.25, -1.0])
    assert init["id"] != "c0.i0"
    assert_problem(tell(client, sid, ("c0.i0", None)), 409)  # obsolete since the reset
    assert outcomes(tell(client, sid, (init["id"], -2.0))) == ["initialized"]
    assert outcomes(tell(client, sid, (init["id"], -2.0))) == ["duplicate"]
    session = summary(client, sid)
    chain0 = session["chain_summaries"][0]
    assert (chain0["status"], chain0["evaluations"], chain0["resets"]) == ("warmup", 2, 1)
    assert session["status"] == "warmup"
    assert ask(client, sid, max=2)["status"] == "warmup"
    # A chain with a current state keeps it.
    before = snapshot(client, sid)
    response = client.post(f"/v1/sessions/{sid}/chains/0/reset", json={"initial": [9.0, 9.0]})
    assert_problem(response, 409)
    assert snapshot(client, sid) == before


def test_reset_makes_a_pending_initial_point_obsolete(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client, chains=1)["id"]
    (first,) = ask(client, sid)["proposals"]
    response = client.post(f"/v1/sessions/{sid}/chains/0/reset", json={"initial": [1.0, 2.0]})
    assert response.status_code == 200, response.text
    assert_problem(tell(client, sid, (first["id"], -1.0)), 409)
    (second,) = ask(client, sid)["proposals"]
    assert second["id"] != first["id"]
    assert second["x"] == [1.0, 2.0]
    # Nothing was evaluated yet: the summary counts told values, not resets.
    chain = summary(client, sid)["chain_summaries"][0]
    assert (chain["status"], chain["resets"], chain["evaluations"]) == ("initial", 1, 0)


# ------------------------------------------------------------------------------- step


def test_step_tells_then_hands_out_the_told_chains_next_proposals(client: TestClient) -> None:
    sid = create(client, chains=3)["id"]
    assert len(ask(client, sid, max=3)["proposals"]) == 3
    # Default max: one proposal per result, the told chains' next ones.
    answer = step(client, sid, ("c0.i0", -1.0), ("c1.i0", -1.0))
    assert [r["outcome"] for r in answer["results"]] == ["initialized", "initialized"]
    assert sorted(p["id"] for p in answer["proposals"]) == ["c0.i1", "c1.i1"]
    assert answer["done"] is False
    # max=0: a tell alone; c0's next proposal stays free.
    answer = step(client, sid, ("c0.i1", 0.0), max=0)
    assert [r["outcome"] for r in answer["results"]] == ["accepted"]
    assert answer["proposals"] == []
    # max=1 with two told chains: one of theirs, not the free chain 0.
    answer = step(client, sid, ("c1.i1", 0.0), ("c2.i0", -1.0), max=1)
    assert [r["id"] for r in answer["results"]] == ["c1.i1", "c2.i0"]
    (only,) = answer["proposals"]
    assert only["chain"] in (1, 2)
    # No results: an ask. The free chains: 0 and whichever of 1, 2 was not leased.
    answer = step(client, sid, max=5)
    assert answer["results"] == []
    assert sorted(p["chain"] for p in answer["proposals"]) == sorted({0, 1, 2} - {only["chain"]})
    assert {p["id"] for p in answer["proposals"]} >= {"c0.i2"}


def test_max_iterations_ends_the_session(client: TestClient, assert_problem: ProblemCheck) -> None:
    sid = create(client, chains=2, warmup=2, max_iterations=5)["id"]
    told = run(client, sid, transitions=100)
    assert len(told) == 2 * (1 + 5)
    answer = ask(client, sid, max=2)
    assert answer == {
        "proposals": [],
        "status": "done",
        "done": True,
        "next_lease_expires_at": None,
    }
    assert step(client, sid)["done"] is True
    body = summary(client, sid)
    assert body["status"] == "done"
    assert [(c["status"], c["iterations"]) for c in body["chain_summaries"]] == [("done", 5)] * 2
    before = snapshot(client, sid)
    assert_problem(tell(client, sid, ("c0.i6", -1.0)), 409)
    assert snapshot(client, sid) == before
    assert [len(c["draws"]) for c in before[1]["chains"]] == [5, 5]


def test_apps_sharing_a_redis_store_apply_each_result_once(
    start_client: ClientFactory, assert_problem: ProblemCheck
) -> None:
    # Two service processes, in effect: each keeps its own view of the chains.
    a, b = start_client("redis"), start_client("redis")
    sid = create(a, chains=1)["id"]
    ask(a, sid)
    assert ask(b, sid)["proposals"] == []  # the lease lives in the store
    assert outcomes(tell(a, sid, ("c0.i0", -5.0))) == ["initialized"]
    assert outcomes(tell(b, sid, ("c0.i0", -5.0))) == ["duplicate"]
    assert_problem(tell(b, sid, ("c0.i0", -6.0)), 409)
    (p1,) = ask(b, sid)["proposals"]
    assert outcomes(tell(b, sid, (p1["id"], 0.0))) == ["accepted"]
    # a last saw the chain at its initial point: it catches up instead of refusing.
    assert outcomes(tell(a, sid, ("c0.i2", -0.5))) in (["accepted"], ["rejected"])
    assert outcomes(tell(a, sid, ("c0.i1", 0.0))) == ["duplicate"]
    assert outcomes(tell(b, sid, ("c0.i2", -0.5))) == ["duplicate"]
    assert_problem(tell(b, sid, ("c0.i2", -0.25)), 409)
    assert snapshot(a, sid) == snapshot(b, sid)
    assert summary(a, sid)["evaluations"] == 3
    assert b.delete(f"/v1/sessions/{sid}").status_code == 204
    assert_problem(tell(a, sid, ("c0.i1", 0.0)), 404)
    assert_problem(a.get(f"/v1/sessions/{sid}"), 404)


# ----------------------------------------------------------------------------- replay


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_same_seed_and_values_give_the_same_draws_on_every_store(
    start_client: ClientFactory, algorithm: str
) -> None:
    fields = {"algorithm": algorithm, "chains": 2, "seed": 2024, "warmup": 15}
    if algorithm == "sgld":
        fields["options"] = {"data_size": 1}  # required: a model of one datum (see run)
    memory, redis = start_client("memory"), start_client("redis")
    sessions = [
        (memory, create(memory, **fields)["id"]),
        (memory, create(memory, **fields)["id"]),
        (redis, create(redis, **fields)["id"]),
    ]
    npys, jsons = [], []
    for client, sid in sessions:
        run(client, sid, 30)
        query = {"include_warmup": "true", "format": "npy"}
        npys.append(client.get(f"/v1/sessions/{sid}/draws", params=query).content)
        jsons.append(draws(client, sid, include_warmup="true")["chains"])
    assert npys[0] == npys[1] == npys[2]
    assert jsons[0] == jsons[1] == jsons[2]
    assert len(jsons[0][0]["draws"]) == 30
    assert jsons[0][0]["draws"] != jsons[0][1]["draws"]  # chains are independent


# ------------------------------------------------------------------------------ draws


@pytest.fixture
def drawn(client: TestClient) -> str:
    """A session of two 2-d chains with 12 transitions each, the first 5 warm-up."""
    sid: str = create(client, warmup=5, param_names=["a", "b"])["id"]
    run(client, sid, 12)
    return sid


def test_draws_as_json(client: TestClient, drawn: str) -> None:
    full = draws(client, drawn, include_warmup="true")
    assert full["param_names"] == ["a", "b"]
    assert full["next"] is None
    assert [c["chain"] for c in full["chains"]] == [0, 1]
    for chain in full["chains"]:
        assert chain["start"] == 0
        assert chain["iterations"] == list(range(1, 13))
        assert len(chain["draws"]) == len(chain["log_density"]) == 12
        # Each draw's log density is the one told for that very point.
        assert chain["log_density"] == [gaussian(x) for x in chain["draws"]]

    post = draws(client, drawn)  # warm-up excluded by default
    for chain, whole in zip(post["chains"], full["chains"], strict=True):
        assert chain["iterations"] == list(range(6, 13))
        assert chain["draws"] == whole["draws"][5:]
        assert chain["log_density"] == whole["log_density"][5:]

    sliced = draws(client, drawn, start=1, stop=6, thin=2)
    for chain, whole in zip(sliced["chains"], post["chains"], strict=True):
        assert chain["start"] == 1
        assert chain["iterations"] == [7, 9, 11]
        assert chain["draws"] == whole["draws"][1:6:2]

    one = draws(client, drawn, chain=1, include_warmup="true")
    assert one["chains"] == [full["chains"][1]]


def test_draws_are_paged(make_client: ClientFactory) -> None:
    client = make_client(Settings(draws_page_size=4))
    sid = create(client, warmup=5)["id"]
    run(client, sid, 12)

    def pages(**query: Any) -> list[Json]:
        out = [draws(client, sid, **query)]
        while out[-1]["next"] is not None:
            # A reference relative to the page's URL: it resolves under a path prefix.
            assert out[-1]["next"].startswith("draws?")
            response = client.get(urljoin(f"/v1/sessions/{sid}/draws", out[-1]["next"]))
            assert response.status_code == 200, response.text
            out.append(response.json())
        return out

    # Both chains: 4 rows a page, 2 per chain.
    both = pages(include_warmup="true")
    assert len(both) == 6
    assert [p["chains"][0]["start"] for p in both] == [0, 2, 4, 6, 8, 10]
    for k in (0, 1):
        alone = pages(include_warmup="true", chain=k)  # one chain: 4 rows a page
        assert len(alone) == 3
        for key in ("iterations", "draws", "log_density"):
            joined = [v for p in both for v in p["chains"][k][key]]
            assert joined == [v for p in alone for v in p["chains"][0][key]]
        assert [i for p in alone for i in p["chains"][0]["iterations"]] == list(range(1, 13))
    # Post-warm-up, thinned: 7 draws, every other one, 2 a page per chain.
    thinned = pages(thin=2)
    assert [i for p in thinned for i in p["chains"][0]["iterations"]] == [6, 8, 10, 12]
    # CSV and NPY pages link to the next one.
    response = client.get(f"/v1/sessions/{sid}/draws", params={"format": "csv", "chain": 0})
    rows = response.text.splitlines()[1:]
    while "link" in response.headers:
        next_url = response.headers["link"].split(">")[0].lstrip("<")
        assert response.headers["link"].endswith('rel="next"')
        response = client.get(urljoin(str(response.url), next_url))
        assert response.status_code == 200, response.text
        rows += response.text.splitlines()[1:]
    assert [int(row.split(",")[1]) for row in rows] == list(range(6, 13))


def test_draws_page_size_is_a_parameter(make_client: ClientFactory) -> None:
    client = make_client(Settings(draws_page_size=4, max_draws_page_size=10))
    sid = create(client, warmup=0)["id"]
    run(client, sid, 12)
    # 6 draws a page over 2 chains: 3 per chain, so 12 draws per chain take 4 pages.
    page = draws(client, sid, page_size=6)
    assert [len(c["draws"]) for c in page["chains"]] == [3, 3]
    assert "page_size=6" in page["next"]
    second = client.get(urljoin(f"/v1/sessions/{sid}/draws", page["next"])).json()
    assert [c["start"] for c in second["chains"]] == [3, 3]
    # One page of all of it, and a page size over the limit is refused.
    whole = draws(client, sid, chain=0, page_size=10)
    assert len(whole["chains"][0]["draws"]) == 10
    refused = client.get(f"/v1/sessions/{sid}/draws", params={"page_size": 11})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "page_size"


def test_draws_as_csv(client: TestClient, drawn: str) -> None:
    full = draws(client, drawn, include_warmup="true")
    for warmup in (True, False):
        response = client.get(
            f"/v1/sessions/{drawn}/draws",
            params={"format": "csv", "include_warmup": str(warmup).lower()},
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/csv")
        header, *rows = list(csv.reader(io.StringIO(response.text)))
        assert header == ["chain", "iteration", "warmup", "log_density", "a", "b"]
        skip = 0 if warmup else 5
        assert len(rows) == 2 * (12 - skip)
        for row in rows:
            chain, iteration = int(row[0]), int(row[1])
            json_chain = full["chains"][chain]
            k = json_chain["iterations"].index(iteration)
            assert int(row[2]) == int(iteration <= 5)
            assert float(row[3]) == json_chain["log_density"][k]
            assert [float(v) for v in row[4:]] == json_chain["draws"][k]
        assert {int(r[1]) for r in rows} == set(range(1 + skip, 13))


def test_draws_as_npy(client: TestClient, drawn: str) -> None:
    for query in ({}, {"include_warmup": "true"}, {"chain": 1, "start": 2}):
        response = client.get(f"/v1/sessions/{drawn}/draws", params={**query, "format": "npy"})
        assert response.status_code == 200, response.text
        array = np.load(io.BytesIO(response.content), allow_pickle=False)
        expected = np.array([c["draws"] for c in draws(client, drawn, **query)["chains"]])
        assert array.dtype == np.float64
        assert array.shape == expected.shape
        np.testing.assert_array_equal(array, expected)
    assert array.shape == (1, 5, 2)


# ------------------------------------------------------------------------ diagnostics


def test_diagnostics_of_a_converged_run(client: TestClient) -> None:
    sid = create(client, chains=4, warmup=100, seed=3)["id"]
    run(client, sid, 400)
    response = client.get(f"/v1/sessions/{sid}/diagnostics")
    assert response.status_code == 200, response.text
    body = response.json()
    post = np.array([c["draws"] for c in draws(client, sid)["chains"]])  # (4, 300, 2)
    assert [p["name"] for p in body["parameters"]] == ["x0", "x1"]
    for k, p in enumerate(body["parameters"]):
        values = [p[key] for key in ("mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")]
        assert all(isinstance(v, float) and math.isfinite(v) for v in values), p
        # Computed on exactly the post-warm-up draws.
        assert p["mean"] == pytest.approx(post[..., k].mean(), rel=1e-9, abs=1e-12)
        assert p["sd"] == pytest.approx(post[..., k].std(ddof=1), rel=1e-9)
        # 1200 draws of a standard normal by RWM, whose bulk ESS here is about 150 (it
        # is 50 to 250 over seeds 3 to 6): the MCSE is about 0.08, the sd's own error
        # about 0.06, and the split R-hat of such chains within about 0.1 of 1 (1.03 to
        # 1.10 over those seeds). The bounds are wider; a broken statistic or unmixed
        # chains fall far outside them.
        assert abs(p["mean"]) < 4 * p["mcse_mean"]
        assert 0.8 < p["sd"] < 1.2
        assert 0.02 < p["mcse_mean"] < 0.2
        assert 50 < p["ess_bulk"] < 1200
        assert 20 < p["ess_tail"] < 1200
        assert 0.99 < p["r_hat"] < 1.15
    assert [c["chain"] for c in body["chains"]] == [0, 1, 2, 3]
    for c in body["chains"]:
        assert (c["iterations"], c["draws"]) == (400, 300)
        assert 0 < c["acceptance_rate"] < 1


def test_diagnostics_without_draws_are_null(client: TestClient) -> None:
    empty = create(client, chains=2)["id"]
    ask(client, empty, max=2)
    tell(client, empty, ("c0.i0", -1.0))
    one = create(client, chains=2, warmup=0)["id"]
    run(client, one, 1)  # one draw per chain: too few for anything but mean and sd
    for sid, n in ((empty, 0), (one, 1)):
        response = client.get(f"/v1/sessions/{sid}/diagnostics")
        assert response.status_code == 200, response.text
        body = response.json()
        undefined = ["mcse_mean", "ess_bulk", "ess_tail", "r_hat"] + (
            ["mean", "sd"] if n == 0 else []
        )
        for p in body["parameters"]:
            assert [p[k] for k in undefined] == [None] * len(undefined)
        assert [c["draws"] for c in body["chains"]] == [n, n]
        assert all((c["acceptance_rate"] is None) == (n == 0) for c in body["chains"])


# --------------------------------------------------------------------- pseudo-marginal


def test_pseudo_marginal_sessions_evaluate_only_proposals(client: TestClient) -> None:
    sid = create(client, chains=2, pseudo_marginal=True, warmup=10)["id"]
    noise = np.random.default_rng(8)
    sigma = 0.5

    def estimate(x: list[float]) -> float:
        # log of an unbiased estimate: exp(N(-sigma^2 / 2, sigma^2)) has mean 1.
        return gaussian(x) + float(noise.normal(-0.5 * sigma**2, sigma))

    told = run(client, sid, 60, estimate)
    assert len({p["id"] for p in told}) == len(told)  # no point is evaluated twice
    assert sorted(p["id"] for p in told if p["kind"] == "init") == ["c0.i0", "c1.i0"]
    assert all(p["kind"] == "proposal" for p in told if p["iteration"] > 0)
    assert summary(client, sid)["evaluations"] == len(told) == 2 * 61

    chains = draws(client, sid, include_warmup="true")["chains"]
    for chain in (0, 1):
        by_iteration = {p["iteration"]: p for p in told if p["chain"] == chain}
        current = by_iteration[0]["log_density"]
        for t, kept in enumerate(chains[chain]["log_density"], start=1):
            if by_iteration[t]["outcome"] == "accepted":
                current = by_iteration[t]["log_density"]
            assert kept == current  # the accepted estimate is kept, never redrawn


# ----------------------------------------------------------------------------- API keys


def test_api_keys_guard_and_separate_sessions(
    make_client: ClientFactory, assert_problem: ProblemCheck
) -> None:
    client = make_client(Settings(api_key_hashes=[hash_api_key("k1"), hash_api_key("k2")]))
    body = {"algorithm": "rwm", "dim": 1}
    assert_problem(client.post("/v1/sessions", json=body), 401)
    assert_problem(client.get("/v1/sessions"), 401)
    assert_problem(client.post("/v1/sessions", json=body, headers={"X-API-Key": "k3"}), 403)
    assert_problem(client.get("/v1/sessions", headers={"X-API-Key": ""}), 401)

    k1, k2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
    response = client.post("/v1/sessions", json=body, headers=k1)
    assert response.status_code == 201, response.text
    sid = response.json()["id"]
    base = f"/v1/sessions/{sid}"
    assert_problem(client.get(base), 401)
    assert_problem(client.get(base, headers={"X-API-Key": "k1x"}), 403)
    tell_body = {"results": [{"id": "c0.i0", "log_density": -1.0}]}
    assert_problem(client.get(base, headers=k2), 404)
    assert_problem(client.post(f"{base}/ask", json={}, headers=k2), 404)
    assert_problem(client.post(f"{base}/tell", json=tell_body, headers=k2), 404)
    assert_problem(client.post(f"{base}/step", json=tell_body, headers=k2), 404)
    assert_problem(client.get(f"{base}/draws", headers=k2), 404)
    assert_problem(client.get(f"{base}/diagnostics", headers=k2), 404)
    assert_problem(client.delete(base, headers=k2), 404)
    assert client.get("/v1/sessions", headers=k2).json()["sessions"] == []
    assert [s["id"] for s in client.get("/v1/sessions", headers=k1).json()["sessions"]] == [sid]
    # Untouched by k2's attempts, and still k1's to use.
    assert client.get(base, headers=k1).json()["evaluations"] == 0
    (first,) = client.post(f"{base}/ask", json={}, headers=k1).json()["proposals"]
    assert first["id"] == "c0.i0"
    assert client.delete(base, headers=k1).status_code == 204


def test_a_deleted_session_leaves_nothing_in_the_process(client: TestClient) -> None:
    """The process's caches (decoded chain states, cold parts, proposals, metadata) drop
    a deleted session at once, rather than hold its states until pushed out."""
    sid = create(client, chains=3)["id"]
    run(client, sid, 5)
    service = client.app.state.sessions  # type: ignore[attr-defined]
    chains = service.catalog.chains

    def kept() -> int:
        caches = (chains._chains, chains._cold, chains._proposals, service.catalog._meta)
        return sum(1 for cache in caches for key in cache if sid in (key, key[0]))

    assert kept() > 0
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert kept() == 0
