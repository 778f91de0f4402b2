"""Starting points over HTTP, on the memory and the Redis store: over-dispersed draws,
new draws for a start outside the support, the bound on them, and chains that wait for
a reset and say so."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.core.running.initial import initial_point
from kameleon.core.running.inprocess import sample

Json = dict[str, Any]
ProblemCheck = Callable[[httpx.Response, int], Json]
LogDensity = Callable[[list[float]], float]


def half_space(x: list[float] | np.ndarray[Any, Any]) -> float:
    """A standard normal cut to ``x[0] >= 0``: half of the default box is outside."""
    v = np.asarray(x, dtype=np.float64)
    return -0.5 * float(v @ v) if v[0] >= 0 else -math.inf


def create(client: TestClient, **fields: Any) -> Json:
    body = {"algorithm": "rwm", "dim": 2, "chains": 2, "seed": 11, "warmup": 5, **fields}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    summary: Json = response.json()
    return summary


def post(client: TestClient, sid: str, what: str, body: Json) -> Json:
    response = client.post(f"/v1/sessions/{sid}/{what}", json=body)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def tell(client: TestClient, sid: str, *results: tuple[str, Any]) -> httpx.Response:
    body = {"results": [{"id": pid, "log_density": value} for pid, value in results]}
    response: httpx.Response = client.post(f"/v1/sessions/{sid}/tell", json=body)
    return response


def summary(client: TestClient, sid: str) -> Json:
    response = client.get(f"/v1/sessions/{sid}")
    assert response.status_code == 200, response.text
    body: Json = response.json()
    return body


def drive(client: TestClient, sid: str, logp: LogDensity, chains: int) -> list[Json]:
    """Evaluate ``logp`` at every proposal with ask, then step, until no proposal is
    handed out. Returns every result told, with the proposal's fields."""
    told: list[Json] = []
    proposals = post(client, sid, "ask", {"max": chains})["proposals"]
    while proposals:
        results = [{"id": p["id"], "log_density": _json(logp(p["x"]))} for p in proposals]
        answer = post(client, sid, "step", {"results": results, "max": chains})
        for p, result in zip(proposals, answer["results"], strict=True):
            assert (result["id"], result["chain"]) == (p["id"], p["chain"])
            told.append({**p, "outcome": result["outcome"]})
        proposals = answer["proposals"]
    return told


def _json(value: float) -> float | None:
    return None if value == -math.inf else value


# ------------------------------------------------------------------------ starting points


def test_chains_start_apart_in_the_box_minus_2_to_2(client: TestClient) -> None:
    session = create(client, dim=3, chains=4, seed=21)
    assert (session["initial_radius"], session["max_initial_attempts"]) == (2.0, 100)
    inits = post(client, session["id"], "ask", {"max": 4})["proposals"]
    assert sorted(p["chain"] for p in inits) == [0, 1, 2, 3]
    for p in inits:
        assert p["kind"] == "init" and p["id"] == f"c{p['chain']}.i0"
        assert p["x"] == initial_point(3, seed=21, chain=p["chain"], attempt=0).tolist()
        assert all(-2 < v < 2 for v in p["x"])
    assert len({tuple(p["x"]) for p in inits}) == 4


def test_a_given_initial_point_is_used_exactly_unless_a_radius_is_given(
    client: TestClient,
) -> None:
    exact = create(client, chains=2, initial=[[5.0, -5.0]])
    assert exact["initial_radius"] is None
    inits = post(client, exact["id"], "ask", {"max": 2})["proposals"]
    assert [p["x"] for p in inits] == [[5.0, -5.0]] * 2
    around = create(client, chains=2, initial=[[5.0, -5.0], [1.0, 1.0]], initial_radius=0.5)
    assert around["initial_radius"] == 0.5
    inits = post(client, around["id"], "ask", {"max": 2})["proposals"]
    for p in inits:
        center = [[5.0, -5.0], [1.0, 1.0]][p["chain"]]
        assert (
            p["x"]
            == initial_point(
                2, seed=11, chain=p["chain"], attempt=0, center=center, radius=0.5
            ).tolist()
        )
        assert all(abs(v - c) < 0.5 for v, c in zip(p["x"], center, strict=True))


@pytest.mark.parametrize(
    "fields",
    [
        {"initial_radius": 0},
        {"initial_radius": -1.0},
        {"initial_radius": "1"},
        {"max_initial_attempts": 0},
        {"max_initial_attempts": 10_001},
        {"initial": [[1e308, 0.0]], "initial_radius": 1e308},
    ],
)
def test_bad_start_options_are_422(
    client: TestClient, assert_problem: ProblemCheck, fields: Json
) -> None:
    body = {"algorithm": "rwm", "dim": 2, **fields}
    problem = assert_problem(client.post("/v1/sessions", json=body), 422)
    assert any(name in problem["detail"] for name in fields), problem


# ---------------------------------------------------------------------- outside the support


def test_a_drawn_start_outside_the_support_is_redrawn_and_the_session_completes(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client, chains=4, seed=3, warmup=5, max_iterations=20)["id"]
    told = drive(client, sid, half_space, 4)
    final = summary(client, sid)
    assert final["status"] == "done"
    redrawn = [c for c in final["chain_summaries"] if c["resets"] > 0]
    assert redrawn, "the seed should put some chain's first start outside the support"
    for chain in final["chain_summaries"]:
        inits = [t for t in told if t["chain"] == chain["chain"] and t["kind"] == "init"]
        # Attempts 0, 1, ...: every one but the last outside, each with a new id.
        assert [t["id"] for t in inits] == [
            f"c{chain['chain']}.i0" if a == 0 else f"c{chain['chain']}.e{a}.i0"
            for a in range(len(inits))
        ]
        assert [t["outcome"] for t in inits] == ["outside_support"] * (len(inits) - 1) + [
            "initialized"
        ]
        for a, t in enumerate(inits):
            assert t["x"] == initial_point(2, seed=3, chain=chain["chain"], attempt=a).tolist()
        assert (chain["status"], chain["iterations"]) == ("done", 20)
        assert chain["resets"] == len(inits) - 1
        assert chain["evaluations"] == 20 + len(inits)
    # A late retry of a replaced start: the same value is a duplicate, another one 409.
    chain = redrawn[0]["chain"]
    before = summary(client, sid)
    response = tell(client, sid, (f"c{chain}.i0", None))
    assert response.status_code == 200, response.text
    assert response.json()["results"] == [
        {"id": f"c{chain}.i0", "chain": chain, "outcome": "duplicate"}
    ]
    assert_problem(tell(client, sid, (f"c{chain}.i0", -1.0)), 409)
    assert summary(client, sid) == before


def test_the_redrawn_start_is_handed_out_again_and_its_id_is_new(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client, chains=1, seed=5)["id"]
    (first,) = post(client, sid, "ask", {})["proposals"]
    # The next id is predictable, but it was not handed out: telling it with the old
    # one refuses the whole request.
    response = tell(client, sid, ("c0.i0", None), ("c0.e1.i0", -1.0))
    assert_problem(response, 409)
    assert summary(client, sid)["chain_summaries"][0]["evaluations"] == 0
    answer = post(client, sid, "step", {"results": [{"id": "c0.i0", "log_density": None}]})
    assert answer["results"] == [{"id": "c0.i0", "chain": 0, "outcome": "outside_support"}]
    (second,) = answer["proposals"]
    assert (second["id"], second["kind"], second["iteration"]) == ("c0.e1.i0", "init", 0)
    assert second["x"] != first["x"]
    assert second["x"] == initial_point(2, seed=5, chain=0, attempt=1).tolist()
    chain = summary(client, sid)["chain_summaries"][0]
    assert (chain["status"], chain["resets"], chain["evaluations"]) == ("initial", 1, 1)
    # The step leased it to its caller: another ask gets nothing (not the old start).
    assert post(client, sid, "ask", {})["proposals"] == []
    # Retrying the old result in the same request as the new one: a duplicate, then
    # the new point applied.
    response = tell(client, sid, ("c0.i0", "-inf"), ("c0.e1.i0", -1.5))
    assert [r["outcome"] for r in response.json()["results"]] == ["duplicate", "initialized"]
    assert summary(client, sid)["chain_summaries"][0]["status"] == "warmup"


def test_redraws_are_bounded_then_the_chain_waits_for_a_reset(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = create(client, chains=2, seed=8, max_initial_attempts=5, max_iterations=3)["id"]
    told = drive(client, sid, lambda x: -math.inf, 2)  # a target that is -inf everywhere
    assert len(told) == 10  # 5 drawn starts per chain, all outside, then nothing
    assert {t["outcome"] for t in told} == {"outside_support"}
    session = summary(client, sid)
    assert session["status"] == "needs_initial_point"
    for chain in session["chain_summaries"]:
        assert (chain["status"], chain["resets"], chain["evaluations"]) == (
            "needs_initial_point",
            4,
            5,
        )
    answer = post(client, sid, "ask", {"max": 2})
    assert (answer["proposals"], answer["status"], answer["done"]) == (
        [],
        "needs_initial_point",
        False,
    )
    # The last drawn start's result is kept: a retry is a duplicate.
    assert [r["outcome"] for r in tell(client, sid, ("c0.e4.i0", None)).json()["results"]] == [
        "duplicate"
    ]

    # A reset revives a chain; a point given by a reset is used exactly, never replaced.
    response = client.post(f"/v1/sessions/{sid}/chains/0/reset", json={"initial": [0.5, 0.5]})
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["resets"]) == ("initial", 5)
    assert_problem(tell(client, sid, ("c0.e4.i0", None)), 409)  # obsolete since the reset
    assert_problem(tell(client, sid, ("c0.i0", None)), 409)
    (init,) = post(client, sid, "ask", {"max": 2})["proposals"]
    assert (init["id"], init["x"]) == ("c0.e5.i0", [0.5, 0.5])
    assert [r["outcome"] for r in tell(client, sid, (init["id"], None)).json()["results"]] == [
        "outside_support"
    ]
    assert summary(client, sid)["chain_summaries"][0]["status"] == "needs_initial_point"
    assert post(client, sid, "ask", {"max": 2})["proposals"] == []

    for chain in (0, 1):
        response = client.post(
            f"/v1/sessions/{sid}/chains/{chain}/reset", json={"initial": [0.1, 0.2]}
        )
        assert response.status_code == 200, response.text
    assert summary(client, sid)["status"] == "warmup"
    drive(client, sid, lambda x: -0.5 * math.fsum(v * v for v in x), 2)
    final = summary(client, sid)
    assert final["status"] == "done"
    assert [c["iterations"] for c in final["chain_summaries"]] == [3, 3]


def test_tell_outcomes_name_their_chain_in_request_order(client: TestClient) -> None:
    sid = create(client, chains=3, initial=[[0.0, 0.0]])["id"]
    post(client, sid, "ask", {"max": 3})
    response = tell(client, sid, ("c2.i0", -1.0), ("c0.i0", None), ("c1.i0", -2.0))
    assert response.status_code == 200, response.text
    assert response.json()["results"] == [
        {"id": "c2.i0", "chain": 2, "outcome": "initialized"},
        {"id": "c0.i0", "chain": 0, "outcome": "outside_support"},
        {"id": "c1.i0", "chain": 1, "outcome": "initialized"},
    ]


# ------------------------------------------------------------------------- same as in process


@pytest.mark.parametrize("algorithm", ["rwm", "am"])
def test_service_draws_equal_in_process_draws_on_a_restricted_support(
    client: TestClient, algorithm: str
) -> None:
    chains, warmup, iterations, seed = 3, 30, 40, 18  # seed 18: two starts outside
    sid = create(
        client,
        algorithm=algorithm,
        chains=chains,
        seed=seed,
        warmup=warmup,
        max_iterations=warmup + iterations,
    )["id"]
    drive(client, sid, half_space, chains)
    final = summary(client, sid)
    assert final["status"] == "done"
    assert any(c["resets"] > 0 for c in final["chain_summaries"])  # redraws happened
    response = client.get(f"/v1/sessions/{sid}/draws")
    assert response.status_code == 200, response.text
    served = np.array([c["draws"] for c in response.json()["chains"]], dtype=np.float64)
    local = sample(
        half_space,
        2,
        algorithm=algorithm,
        chains=chains,
        iterations=iterations,
        warmup=warmup,
        seed=seed,
        warn=False,
    )
    assert served.shape == local.shape == (chains, iterations, 2)
    assert served.tobytes() == local.tobytes()


def test_a_redraw_is_seen_by_another_service_process(
    start_client: Callable[..., TestClient],
) -> None:
    """Two apps on one Redis: the one that did not redraw decides on its stale copy of
    the chain first, is refused by the store, and decides again on the new record."""
    a, b = start_client("redis"), start_client("redis")
    sid = create(a, chains=1, seed=5)["id"]
    (first,) = post(a, sid, "ask", {})["proposals"]
    assert summary(a, sid)["chain_summaries"][0]["status"] == "initial"  # a caches it
    assert [r["outcome"] for r in tell(b, sid, ("c0.i0", None)).json()["results"]] == [
        "outside_support"
    ]
    assert [r["outcome"] for r in tell(a, sid, ("c0.i0", None)).json()["results"]] == ["duplicate"]
    (second,) = post(a, sid, "ask", {})["proposals"]
    assert (second["id"], second["x"]) == (
        "c0.e1.i0",
        initial_point(2, seed=5, chain=0, attempt=1).tolist(),
    )
    assert second["x"] != first["x"]
    assert [r["outcome"] for r in tell(b, sid, ("c0.e1.i0", -1.0)).json()["results"]] == [
        "initialized"
    ]
    assert summary(a, sid)["chain_summaries"][0]["resets"] == 1
