"""SGLD over HTTP, on every store: the ask carries its minibatch, tells in parts move the
chain, each draw carries its step size; what is refused; a replay bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
N, BATCH = 200, 20
DATA = np.random.default_rng(4).normal([1.0, -2.0], 1.0, size=(N, 2))
OPTIONS = {"data_size": N, "batch_size": BATCH, "step_size": 1e-2, "step_offset": 5.0}


def _parts(p: Json) -> Json:
    """x_i ~ N(theta, I), theta ~ N(0, 10^2 I): the tell of a minibatch's parts."""
    x = np.asarray(p["x"])
    r = DATA[p["minibatch"]] - x
    return {
        "id": p["id"],
        "log_prior": -0.5 * float(x @ x) / 100,
        "log_likelihood": -0.5 * float((r * r).sum()),
        "prior_gradient": (-x / 100).tolist(),
        "gradient": r.sum(axis=0).tolist(),
    }


def _create(api: TestClient, **fields: Any) -> str:
    body = {
        "algorithm": "sgld",
        "dim": 2,
        "chains": 2,
        "seed": 11,
        "warmup": 5,
        "max_iterations": 40,
        "options": OPTIONS,
        **fields,
    }
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _run(api: TestClient, sid: str) -> list[Json]:
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 4}).json()["proposals"]
    seen: list[Json] = []
    while proposals:
        answer = api.post(
            f"/v1/sessions/{sid}/step",
            json={"results": [_parts(p) for p in proposals], "max": 4},
        )
        assert answer.status_code == 200, answer.text
        assert all(r["outcome"] in ("initialized", "accepted") for r in answer.json()["results"])
        seen += proposals
        proposals = answer.json()["proposals"]
    return seen


def test_sgld_moves_with_minibatches_and_records_its_steps(client: TestClient) -> None:
    sid = _create(client)
    seen = _run(client, sid)
    assert {p["kind"] for p in seen} == {"init", "minibatch"}
    for p in seen:
        batch = p["minibatch"]
        assert len(batch) == BATCH == len(set(batch)) and batch == sorted(batch)
        assert all(0 <= i < N for i in batch)
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["needs_gradient"] is True
    page = client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    want = [1e-2 * (5.0 + t) ** -0.55 for t in range(1, 41)]
    for chain in page["chains"]:
        assert chain["iterations"] == list(range(1, 41))
        np.testing.assert_allclose(chain["sample_stats"]["step_size"], want, rtol=1e-14)
        draws = np.array(chain["draws"])
        assert np.all(np.diff(draws, axis=0) != 0)  # every transition moved
        assert all(chain["accepted"])
    # The chain moved toward the posterior mean (about the data's mean).
    last = np.array([c["draws"][-1] for c in page["chains"]])
    assert np.all(np.abs(last - DATA.mean(axis=0)) < 0.5)


def test_a_replay_gives_the_same_bits(client: TestClient) -> None:
    pages = []
    for _ in range(2):
        sid = _create(client)
        _run(client, sid)
        pages.append(
            client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
        )
    assert pages[0]["chains"] == pages[1]["chains"]


def test_parts_that_do_not_fit_are_refused(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = _create(client, chains=1)
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert init["kind"] == "init" and len(init["minibatch"]) == BATCH
    good = _parts(init)
    cases = [
        ({"log_likelihood": None}, "results.0.log_likelihood", "log likelihood"),
        ({"log_prior": None}, "results.0.log_prior", "log prior"),
        ({"gradient": None}, "results.0.gradient", "gradient"),
        ({"prior_gradient": None}, "results.0.prior_gradient", "gradient"),
        ({"gradient": [0.0, 0.0, 0.0]}, "results.0.gradient", "2 values"),
        ({"prior_gradient": [0.0]}, "results.0.prior_gradient", "2 values"),
        ({"gradient": [0.0, "x"]}, "results.0.gradient.1", "number"),
    ]
    for change, field, words in cases:
        result = {k: v for k, v in {**good, **change}.items() if v is not None}
        body = assert_problem(
            client.post(f"/v1/sessions/{sid}/tell", json={"results": [result]}), 422
        )
        assert words in body["detail"], body
        assert field in str(body), body
    # A told log_density is ignored: the told value is the estimate.
    ok = client.post(f"/v1/sessions/{sid}/tell", json={"results": [{**good, "log_density": 123.0}]})
    assert ok.json()["results"][0]["outcome"] == "initialized"
    # The estimate is what the service recorded: a retry with another log_density is
    # a duplicate, not a conflict.
    again = client.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{**good, "log_density": -5.0}]}
    )
    assert again.json()["results"][0]["outcome"] == "duplicate"


def test_outside_the_support_needs_no_parts(client: TestClient) -> None:
    sid = _create(client, chains=1)
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    answer = client.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{"id": init["id"], "log_prior": "-inf"}]}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["outcome"] == "outside_support"


def test_log_density_is_still_required_by_the_others(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    response = client.post("/v1/sessions", json={"algorithm": "am", "dim": 2, "chains": 1})
    sid = response.json()["id"]
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert init["minibatch"] is None
    body = assert_problem(
        client.post(f"/v1/sessions/{sid}/tell", json={"results": [{"id": init["id"]}]}), 422
    )
    assert "results.0.log_density" in str(body)
    # A told null still means -inf.
    answer = client.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{"id": init["id"], "log_density": None}]}
    )
    assert answer.json()["results"][0]["outcome"] == "outside_support"


def test_options_are_checked_at_creation(client: TestClient, assert_problem: ProblemCheck) -> None:
    for options, field in [
        ({}, "data_size"),
        ({"data_size": 10, "batch_size": 11}, "batch_size"),
        ({"data_size": 10, "gradient_check": 1}, "gradient_check"),
    ]:
        response = client.post(
            "/v1/sessions",
            json={"algorithm": "sgld", "dim": 2, "chains": 1, "options": options},
        )
        body = assert_problem(response, 422)
        assert field in str(body), body
    pm = client.post(
        "/v1/sessions",
        json={
            "algorithm": "sgld",
            "dim": 2,
            "pseudo_marginal": True,
            "options": {"data_size": 10},
        },
    )
    assert "pseudo_marginal" in str(assert_problem(pm, 422))
