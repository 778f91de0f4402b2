"""Rounds over HTTP (PROTOCOL.md, "Rounds"): one ask hands out a population's round, its
results are taken in any order, in several requests, retried, and the draws are the
in-process run's, bit for bit, on both stores; a lease that runs out hands the round's
untold evaluations out again, with the same ids and points; held results are judged as
any told result (a duplicate, or a 409 for another value)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.servers import KAMELEON, free_port, serving
from tests.service.test_replay import (
    CHAINS,
    DIM,
    ITERATIONS,
    OPTIONS,
    SEED,
    WARMUP,
    _result,
    in_process,
)

Json = dict[str, Any]

ROUNDS = ["ensemble", "smc", "tempering", "importance"]


def _create(api: Any, algorithm: str, **options: Any) -> str:
    body = {
        "algorithm": algorithm,
        "dim": DIM,
        "chains": CHAINS,
        "seed": SEED,
        "warmup": WARMUP,
        "max_iterations": WARMUP + ITERATIONS,
        "options": options,
    }
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _post(api: Any, path: str, body: Json) -> Json:
    response = api.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    return answer


def _draws(api: TestClient, sid: str) -> np.ndarray:
    response = api.get(f"/v1/sessions/{sid}/draws?format=npy")
    assert response.status_code == 200, response.text
    return np.load(io.BytesIO(response.content))  # type: ignore[no-any-return]


def _shuffled_run(
    apis: Sequence[Any], sid: str, rng: np.random.Generator, most: int
) -> dict[str, int]:
    """Drive a session with asks of ``most``, telling what is out in random order and
    random portions, now and then a result told again, each request to the next of
    ``apis`` in turn (clients of one service, or of service processes sharing a store);
    the outcomes counted. Checks that nothing is handed out twice while its lease
    runs."""
    turn = iter(range(1 << 30))

    def post(path: str, body: Json) -> Json:
        return _post(apis[next(turn) % len(apis)], path, body)

    out: dict[str, Json] = {}
    told: list[Json] = []
    counts: dict[str, int] = {}
    answer = post(f"/v1/sessions/{sid}/ask", {"max": most})
    for _ in range(100_000):
        for p in answer["proposals"]:
            assert p["id"] not in out, f"{p['id']} handed out twice under a running lease"
            out[p["id"]] = p
        if not out:
            if answer["done"]:
                return counts
            answer = post(f"/v1/sessions/{sid}/ask", {"max": most})
            assert answer["proposals"] or answer["done"], answer
            continue
        ids = list(out)
        rng.shuffle(ids)
        now = ids[: int(rng.integers(1, len(ids) + 1))]
        results = [_result(out.pop(i)) for i in now]
        if told and rng.random() < 0.2:
            results.append(told[int(rng.integers(len(told)))])  # a retry: a duplicate
        told += results
        answer = post(
            f"/v1/sessions/{sid}/step",
            {"results": results, "max": int(rng.integers(0, most + 1))},
        )
        for r in answer["results"]:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    raise AssertionError("the session never ended")


@pytest.mark.parametrize("algorithm", ROUNDS)
def test_a_round_told_in_any_order_gives_the_in_process_draws(
    algorithm: str, start_client: Callable[..., TestClient]
) -> None:
    expected = in_process(algorithm)
    for store in ("memory", "redis"):
        api = start_client(store)
        sid = _create(api, algorithm)
        counts = _shuffled_run([api], sid, np.random.default_rng(7), most=64)
        assert counts.get("held", 0) > 50, counts  # results did come ahead of their turn
        assert counts.get("duplicate", 0) > 0, counts
        draws = _draws(api, sid)
        assert draws.tobytes() == expected.tobytes(), f"{algorithm} on {store}"


@pytest.mark.parametrize(
    ("algorithm", "options", "length"),
    [
        ("ensemble", {}, 4),  # W = max(8, 2 dim) walkers: half-steps of 4
        ("smc", {"particles": 16}, 16),
        ("tempering", {"temperatures": 5}, 5),
        ("importance", {"particles": 8}, 8),
    ],
)
def test_one_ask_hands_out_whole_rounds(
    algorithm: str, options: Json, length: int, client: TestClient
) -> None:
    sid = _create(client, algorithm, **options)
    inits = _post(client, f"/v1/sessions/{sid}/ask", {"max": 64})["proposals"]
    assert [p["kind"] for p in inits] == ["init"] * CHAINS
    answer = _post(
        client,
        f"/v1/sessions/{sid}/step",
        {"results": [_result(p) for p in inits], "max": 64},
    )
    # Through warm-up's one-at-a-time part (importance's am: each chain hands out one
    # evaluation at a time); the step that tells iteration WARMUP hands out rounds.
    proposals = answer["proposals"]
    while algorithm == "importance" and proposals[0]["iteration"] <= WARMUP:
        assert len(proposals) == CHAINS
        proposals = _post(
            client,
            f"/v1/sessions/{sid}/step",
            {"results": [_result(p) for p in proposals], "max": 64},
        )["proposals"]
    if algorithm == "ensemble":  # the placements first: iterations 1 to W - 1
        assert len(proposals) == CHAINS * 7
        proposals = _post(
            client,
            f"/v1/sessions/{sid}/step",
            {"results": [_result(p) for p in proposals], "max": 64},
        )["proposals"]
    assert len(proposals) == CHAINS * length, [p["id"] for p in proposals]
    for chain in range(CHAINS):
        mine = [p for p in proposals if p["chain"] == chain]
        assert len(mine) == length
        places = [(p["iteration"], p["step"]) for p in mine]
        assert places == sorted(places) and len(set(places)) == length
        expiry = {p["lease_expires_at"] for p in mine}
        assert len(expiry) == 1  # one lease covers the chain's round


def test_waste_free_stages_hand_out_a_step_of_their_chains_and_replay(
    start_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``smc`` with ``waste_free``: after the starting sweep (a round of N) one ask hands
    out a step of the stage's chains, M = N / P points per chain; told in any order, in
    portions, with retries, the draws are the in-process run's on both stores."""
    options = {"particles": 16, "waste_free": 4}
    monkeypatch.setitem(OPTIONS, "smc", options)
    expected = in_process("smc")
    for store in ("memory", "redis"):
        api = start_client(store)
        sid = _create(api, "smc", **options)
        inits = _post(api, f"/v1/sessions/{sid}/ask", {"max": 64})["proposals"]
        first = _post(
            api, f"/v1/sessions/{sid}/step", {"results": [_result(p) for p in inits], "max": 64}
        )["proposals"]
        assert len(first) == CHAINS * 16
        chains = _post(
            api, f"/v1/sessions/{sid}/step", {"results": [_result(p) for p in first], "max": 64}
        )["proposals"]
        assert len(chains) == CHAINS * 4, [p["id"] for p in chains]
        assert {p["iteration"] for p in chains} == set(range(17, 21))
        sid = _create(api, "smc", **options)
        counts = _shuffled_run([api], sid, np.random.default_rng(3), most=64)
        assert counts.get("held", 0) > 50 and counts.get("duplicate", 0) > 0, counts
        assert _draws(api, sid).tobytes() == expected.tobytes(), store


def test_a_lease_that_runs_out_hands_the_untold_out_again(
    start_client: Callable[..., TestClient],
) -> None:
    for store in ("memory", "redis"):
        api = start_client(store)
        sid = _create(api, "smc", particles=8)
        inits = _post(api, f"/v1/sessions/{sid}/ask", {"max": 8})["proposals"]
        first = _post(
            api,
            f"/v1/sessions/{sid}/step",
            {"results": [_result(p) for p in inits], "max": 16, "lease_seconds": 2.0},
        )["proposals"]
        assert len(first) == 16
        late = [p for p in first if p["chain"] == 0][::2]  # every other particle of chain 0
        told = [p for p in first if p not in late]
        answer = _post(api, f"/v1/sessions/{sid}/tell", {"results": [_result(p) for p in told]})
        outcomes = {r["id"]: r["outcome"] for r in answer["results"]}
        # Chain 0's first particle is late: its others are held; chain 1's all applied.
        assert {outcomes[p["id"]] for p in told if p["chain"] == 0} == {"held"}
        assert "held" not in {outcomes[p["id"]] for p in told if p["chain"] == 1}
        # While the lease runs, nobody is handed chain 0's round again.
        again = _post(api, f"/v1/sessions/{sid}/ask", {"max": 16})["proposals"]
        assert not [p for p in again if p["chain"] == 0]
        time.sleep(2.3)
        again = _post(api, f"/v1/sessions/{sid}/ask", {"max": 16})["proposals"]
        mine = [p for p in again if p["chain"] == 0]
        assert [p["id"] for p in mine] == [p["id"] for p in late]
        assert [p["x"] for p in mine] == [p["x"] for p in late]  # the same points


def test_held_results_are_judged_as_any_told_result(client: TestClient) -> None:
    sid = _create(client, "ensemble")
    inits = _post(client, f"/v1/sessions/{sid}/ask", {"max": 2})["proposals"]
    placements = _post(
        client,
        f"/v1/sessions/{sid}/step",
        {"results": [_result(p) for p in inits], "max": 64},
    )["proposals"]
    ahead = next(p for p in placements if p["chain"] == 0 and p["iteration"] == 3)
    result = _result(ahead)
    answer = _post(client, f"/v1/sessions/{sid}/tell", {"results": [result]})
    assert answer["results"][0]["outcome"] == "held"
    again = _post(client, f"/v1/sessions/{sid}/tell", {"results": [result]})
    assert again["results"][0]["outcome"] == "duplicate"
    other = {**result, "log_density": result["log_density"] - 1.0}
    refused = client.post(f"/v1/sessions/{sid}/tell", json={"results": [other]})
    assert refused.status_code == 409
    assert "told before with another value" in refused.json()["errors"][0]["message"]
    # Renewing a held one: told already; an untold one of the round: renewed.
    leases = client.post(
        f"/v1/sessions/{sid}/leases", json={"ids": [ahead["id"]], "lease_seconds": 30}
    )
    assert leases.status_code == 409 and "told already" in leases.json()["detail"]
    untold = next(p for p in placements if p["chain"] == 0 and p["iteration"] == 5)
    renewed = _post(
        client, f"/v1/sessions/{sid}/leases", {"ids": [untold["id"]], "lease_seconds": 30}
    )
    assert renewed["leases"][0]["lease_expires_at"] is not None
    # Beyond the round (the placements end at iteration W - 1 = 7): never issued.
    beyond = {**_result(untold), "id": "c0.i9"}
    refused = client.post(f"/v1/sessions/{sid}/tell", json={"results": [beyond]})
    assert refused.status_code == 409 and "not outstanding" in refused.json()["detail"]
    # The rest told: the held one applied in its turn; the chain moves on to its moves.
    rest = [p for p in placements if p["chain"] == 0 and p["id"] != ahead["id"]]
    answer = _post(client, f"/v1/sessions/{sid}/tell", {"results": [_result(p) for p in rest]})
    assert {r["outcome"] for r in answer["results"]} == {"accepted"}
    chain = client.get(f"/v1/sessions/{sid}").json()["chain_summaries"][0]
    assert chain["iterations"] == 7


def test_a_retried_ask_gets_its_round_back(start_client: Callable[..., TestClient]) -> None:
    for store in ("memory", "redis"):
        api = start_client(store)
        sid = _create(api, "tempering", temperatures=6)
        inits = _post(api, f"/v1/sessions/{sid}/ask", {"max": 2})["proposals"]
        _post(api, f"/v1/sessions/{sid}/tell", {"results": [_result(p) for p in inits]})
        body = {"max": 8, "request_id": "w1-0001"}
        first = _post(api, f"/v1/sessions/{sid}/ask", body)["proposals"]
        assert len(first) == 8  # chain 0's six rungs, then two of chain 1's
        assert [p["chain"] for p in first] == [0] * 6 + [1] * 2
        again = _post(api, f"/v1/sessions/{sid}/ask", body)["proposals"]
        assert again == first
        _post(api, f"/v1/sessions/{sid}/tell", {"results": [_result(first[2])]})
        third = _post(api, f"/v1/sessions/{sid}/ask", body)["proposals"]
        assert third == first[:2] + first[3:]  # without the one told since
        # Chain 1's other four rungs are no one's: the next ask gets them.
        rest = _post(api, f"/v1/sessions/{sid}/ask", {"max": 8})["proposals"]
        assert [p["id"] for p in rest] == [f"c1.i1.s{k}" for k in range(2, 6)]


@pytest.mark.slow
def test_two_service_processes_share_a_round(redis_url: str, redis_prefix: str) -> None:
    """Two processes on one Redis take alternate requests of a shuffled run: each decides
    on the chains as it last saw them, and the store's compare-and-set makes the one
    that saw a stale chain read it again; the draws are the in-process run's."""
    ports = [free_port(), free_port()]
    env = {
        "KAMELEON_STORE": "redis",
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": redis_prefix,
    }
    with (
        serving([KAMELEON, "serve", "--port", str(ports[0])], env, ports[0]) as a,
        serving([KAMELEON, "serve", "--port", str(ports[1])], env, ports[1]) as b,
        httpx.Client(base_url=a, timeout=60) as client_a,
        httpx.Client(base_url=b, timeout=60) as client_b,
    ):
        for algorithm in ("smc", "tempering"):
            sid = _create(client_a, algorithm)
            counts = _shuffled_run([client_a, client_b], sid, np.random.default_rng(3), most=40)
            assert counts.get("held", 0) > 20, counts
            response = client_b.get(f"/v1/sessions/{sid}/draws?format=npy")
            draws = np.load(io.BytesIO(response.content))
            assert draws.tobytes() == in_process(algorithm).tobytes(), algorithm


def test_an_initial_point_outside_the_support_is_replaced_then_rounds_follow(
    client: TestClient,
) -> None:
    sid = _create(client, "smc", particles=8)
    inits = _post(client, f"/v1/sessions/{sid}/ask", {"max": 2})["proposals"]
    outside = {"id": inits[0]["id"], "log_density": None}
    answer = _post(client, f"/v1/sessions/{sid}/step", {"results": [outside], "max": 8})
    assert answer["results"][0]["outcome"] == "outside_support"
    (again,) = [p for p in answer["proposals"] if p["chain"] == 0]
    assert again["kind"] == "init" and again["id"] != inits[0]["id"]  # a new drawn point
    answer = _post(client, f"/v1/sessions/{sid}/step", {"results": [_result(again)], "max": 8})
    assert answer["results"][0]["outcome"] == "initialized"
    assert [p["iteration"] for p in answer["proposals"]] == list(range(1, 9))  # a round


def test_workers_asking_one_at_a_time_share_a_round(
    start_client: Callable[..., TestClient],
) -> None:
    """Each evaluation of a round has a lease of its own: eight workers asking for one
    point each are handed eight different particles of one chain; one handed back is
    the only one handed out again; a worker whose step's answer was lost gets its point
    back by retrying with the same request_id."""
    for store in ("memory", "redis"):
        api = start_client(store)
        body = {"algorithm": "smc", "dim": DIM, "chains": 1, "seed": SEED, "warmup": 100}
        sid = api.post("/v1/sessions", json={**body, "options": {"particles": 8}}).json()["id"]
        (init,) = _post(api, f"/v1/sessions/{sid}/ask", {"max": 1})["proposals"]
        _post(api, f"/v1/sessions/{sid}/tell", {"results": [_result(init)]})
        asked = [_post(api, f"/v1/sessions/{sid}/ask", {"max": 1})["proposals"] for _ in range(9)]
        ids = [a[0]["id"] for a in asked[:8]]
        assert ids == [f"c0.i{k}" for k in range(1, 9)] and asked[8] == []
        back = _post(api, f"/v1/sessions/{sid}/leases", {"ids": [ids[3]], "lease_seconds": 0})
        assert back["leases"][0]["lease_expires_at"] is None
        again = _post(api, f"/v1/sessions/{sid}/ask", {"max": 8})["proposals"]
        assert [p["id"] for p in again] == [ids[3]]
        # A step whose answer is lost, retried: its result is a duplicate, its point its own.
        step = {"results": [_result(asked[0][0])], "max": 1, "request_id": "w7-0001"}
        first = _post(api, f"/v1/sessions/{sid}/step", step)
        retried = _post(api, f"/v1/sessions/{sid}/step", step)
        assert retried["results"][0]["outcome"] == "duplicate"
        assert retried["proposals"] == first["proposals"]
