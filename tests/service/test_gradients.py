"""Gradient samplers over HTTP: told gradients checked and used, the evaluations within a
transition handed out and told like proposals, exactly once, on every store."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from kameleon.core.diagnostics.summary import ess_mean, per_parameter
from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
SCALES = np.array([1e-3, 1.0, 1e3])


def _scaled(x: list[float]) -> tuple[float, list[float]]:
    z = np.asarray(x) / SCALES
    return -0.5 * float(z @ z), (-z / SCALES).tolist()


def _create(api: TestClient, **fields: Any) -> str:
    body = {"algorithm": "mala", "dim": 3, "chains": 2, "seed": 5, "warmup": 10, **fields}
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _run(api: TestClient, sid: str, fn: Any = _scaled, batch: int = 8) -> list[Json]:
    """Answer ``fn`` (log density and gradient) until nothing more is handed out; every
    proposal told."""
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": batch}).json()["proposals"]
    seen: list[Json] = []
    while proposals:
        results = []
        for p in proposals:
            value, gradient = fn(p["x"])
            results.append({"id": p["id"], "log_density": value, "gradient": gradient})
        answer = api.post(f"/v1/sessions/{sid}/step", json={"results": results, "max": batch})
        assert answer.status_code == 200, answer.text
        seen += proposals
        proposals = answer.json()["proposals"]
    return seen


def test_mala_samples_a_target_in_any_units_over_http(client: TestClient) -> None:
    sid = _create(client, chains=4, warmup=500, max_iterations=1500)
    seen = _run(client, sid)
    checks = [p for p in seen if p["kind"] == "gradient_check"]
    # Chain 0 checks the gradient at its initial point: 2 points per coordinate, the
    # first steps of its first transition.
    assert [p["id"] for p in checks] == ["c0.i1"] + [f"c0.i1.s{k}" for k in range(1, 6)]
    assert all(p["chain"] == 0 and p["iteration"] == 1 for p in checks)
    assert [p["step"] for p in checks] == [0, 1, 2, 3, 4, 5]
    # The transition goes on after the check: its proposal is the seventh evaluation.
    assert [p["id"] for p in seen if p["chain"] == 0 and p["iteration"] == 1][-1] == "c0.i1.s6"
    page = client.get(f"/v1/sessions/{sid}/draws").json()
    draws = np.concatenate([np.array(c["draws"]) for c in page["chains"]])
    # 4000 draws with an ESS in the thousands (tests/core/test_mala.py): each
    # coordinate's sd within 10 % of its scale, its mean within 0.1 scales.
    np.testing.assert_allclose(draws.std(axis=0) / SCALES, 1.0, rtol=0.1)
    assert np.all(np.abs(draws.mean(axis=0) / SCALES) < 0.1)
    summary = client.get(f"/v1/sessions/{sid}").json()
    evaluations = [c["evaluations"] for c in summary["chain_summaries"]]
    assert evaluations == [1 + 6 + 1500, 1 + 1500, 1 + 1500, 1 + 1500]


def test_the_first_check_point_is_step_0_of_the_first_transition(client: TestClient) -> None:
    sid = _create(client, chains=1)
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    value, gradient = _scaled(init["x"])
    answer = client.post(
        f"/v1/sessions/{sid}/step",
        json={"results": [{"id": init["id"], "log_density": value, "gradient": gradient}]},
    ).json()
    (first,) = answer["proposals"]
    assert (first["id"], first["kind"], first["iteration"], first["step"]) == (
        "c0.i1",
        "gradient_check",
        1,
        0,
    )
    value, gradient = _scaled(first["x"])
    told = {"id": first["id"], "log_density": value, "gradient": gradient}
    answer = client.post(f"/v1/sessions/{sid}/step", json={"results": [told]}).json()
    assert answer["results"][0]["outcome"] == "step"
    (second,) = answer["proposals"]
    assert (second["id"], second["step"]) == ("c0.i1.s1", 1)
    # Told again: acknowledged, nothing applied twice.
    again = client.post(f"/v1/sessions/{sid}/tell", json={"results": [told]}).json()
    assert again["results"][0]["outcome"] == "duplicate"
    # A step not handed out yet is not outstanding.
    ahead = {"id": "c0.i1.s2", "log_density": 0.0, "gradient": [0.0, 0.0, 0.0]}
    refused = client.post(f"/v1/sessions/{sid}/tell", json={"results": [ahead]})
    assert refused.status_code == 409, refused.text
    # The step after it is what the chain waits for still.
    leased = client.post(
        f"/v1/sessions/{sid}/leases", json={"ids": ["c0.i1.s1"], "lease_seconds": 30}
    )
    assert leased.status_code == 200, leased.text


def test_a_wrong_gradient_stops_the_session_naming_the_coordinate(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    def wrong(x: list[float]) -> tuple[float, list[float]]:
        value, gradient = _scaled(x)
        gradient[1] *= 3.0
        return value, gradient

    sid = _create(client, chains=1)
    proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    for _ in range(20):
        results = [
            {"id": p["id"], "log_density": wrong(p["x"])[0], "gradient": wrong(p["x"])[1]}
            for p in proposals
        ]
        response = client.post(f"/v1/sessions/{sid}/step", json={"results": results})
        if response.status_code != 200:
            break
        proposals = response.json()["proposals"]
    body = assert_problem(response, 422)
    assert body["type"].endswith("/sampler-failed")
    assert "coordinate 1" in body["detail"] and "finite differences" in body["detail"]
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["stopped_by"] == "sampler_error"


def test_gradients_that_do_not_fit_are_refused_and_nothing_is_lost(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid = _create(client, chains=1)
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    cases = [
        ({}, "results.0.gradient", "needs the gradient"),
        ({"gradient": [0.0, 0.0]}, "results.0.gradient", "3 values"),
        ({"gradient": [0.0, "x", 0.0]}, "results.0.gradient.1", "number"),
    ]
    for extra, field, words in cases:
        response = client.post(
            f"/v1/sessions/{sid}/tell",
            json={"results": [{"id": init["id"], "log_density": -1.0, **extra}]},
        )
        body = assert_problem(response, 422)
        assert words in body["detail"], body
        assert field in str(body), body
    # Nothing was applied: the initial point is still outstanding, and a right tell
    # initialises it.
    value, gradient = _scaled(init["x"])
    ok = client.post(
        f"/v1/sessions/{sid}/tell",
        json={"results": [{"id": init["id"], "log_density": value, "gradient": gradient}]},
    )
    assert ok.json()["results"][0]["outcome"] == "initialized"


def test_minus_infinity_needs_no_gradient(client: TestClient) -> None:
    sid = _create(client, chains=1, initial=[[0.0, 0.0, 0.0]], initial_radius=0.001)
    (init,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    response = client.post(
        f"/v1/sessions/{sid}/tell",
        json={"results": [{"id": init["id"], "log_density": "-inf"}]},
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["outcome"] == "outside_support"


def test_the_summary_says_whether_results_need_a_gradient(client: TestClient) -> None:
    for algorithm, needed in (("mala", True), ("nuts", True), ("hmc", True), ("am", False)):
        sid = _create(client, algorithm=algorithm)
        assert client.get(f"/v1/sessions/{sid}").json()["needs_gradient"] is needed


def test_pseudo_marginal_needs_a_sampler_without_gradients(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    body = {"algorithm": "mala", "dim": 2, "pseudo_marginal": True}
    problem = assert_problem(client.post("/v1/sessions", json=body), 422)
    assert "pseudo_marginal" in problem["detail"]


def test_same_seed_and_told_values_replay_bit_for_bit(client: TestClient) -> None:
    a, b = _create(client, max_iterations=40), _create(client, max_iterations=40)
    _run(client, a, batch=1)
    _run(client, b, batch=2)
    pages = [
        client.get(f"/v1/sessions/{s}/draws", params={"include_warmup": "true"}).json()
        for s in (a, b)
    ]
    assert pages[0]["chains"] == pages[1]["chains"]
    assert math.isfinite(pages[0]["chains"][0]["draws"][-1][0])


MILD = np.array([0.5, 1.0, 2.0])


def _mild(x: list[float]) -> tuple[float, list[float]]:
    z = np.asarray(x) / MILD
    return -0.5 * float(z @ z), (-z / MILD).tolist()


@pytest.mark.parametrize("algorithm", ["hmc", "nuts"])
def test_hamiltonian_samplers_over_http(client: TestClient, algorithm: str) -> None:
    """A trajectory's points are handed out one at a time (kind ``leapfrog``, ids with
    their step), and only a transition's end is a draw. (Targets in any units:
    tests/core/test_hmc.py and test_nuts.py; here the protocol, on a mild target.)"""
    # 600 draws: enough for the moments below, whose Monte Carlo error is all they
    # check here (500 iterations per chain, as before, cost twice as many requests).
    warmup, iterations = 100, 150
    sid = _create(
        client, algorithm=algorithm, chains=4, warmup=warmup, max_iterations=warmup + iterations
    )
    seen = _run(client, sid, fn=_mild, batch=4)
    leapfrogs = [p for p in seen if p["kind"] == "leapfrog"]
    assert leapfrogs and all(p["id"].endswith(f".s{p['step']}") for p in leapfrogs if p["step"])
    summary = client.get(f"/v1/sessions/{sid}").json()
    chains = summary["chain_summaries"]
    assert [c["iterations"] for c in chains] == [warmup + iterations] * 4
    # Every evaluation is counted: several per transition.
    assert all(c["evaluations"] > 2 * c["iterations"] for c in chains)
    assert sum(c["evaluations"] for c in chains) == len(seen)
    page = client.get(f"/v1/sessions/{sid}/draws").json()
    chain_draws = np.stack([np.array(c["draws"]) for c in page["chains"]])
    draws = chain_draws.reshape(-1, len(MILD))
    # With this seed the 600 draws have an ESS of the mean over 400 and of the squares
    # over 170 per coordinate (hmc; nuts more), checked (with a margin) so that the
    # tolerances keep their meaning: each mean within 0.2 scales is over 3.7 standard
    # errors (1 / sqrt(ESS)), each sd within 20 % of its scale over 3.4 (the relative
    # error of an sd is 1 / sqrt(2 ESS of the squares)): a false alarm rate under 1e-3
    # per coordinate; a sampler that ignored or misused the told gradients is off by far
    # more.
    assert np.all(per_parameter(ess_mean, chain_draws) > 350)
    assert np.all(per_parameter(ess_mean, chain_draws**2) > 150)
    np.testing.assert_allclose(draws.std(axis=0) / MILD, 1.0, rtol=0.2)
    assert np.all(np.abs(draws.mean(axis=0) / MILD) < 0.2)


def test_a_worker_lost_mid_trajectory_is_recovered_by_its_lease(client: TestClient) -> None:
    """A leapfrog point whose worker vanished is handed out again when its lease runs out
    (here: handed back), same id, same point; its tell then goes on with the trajectory."""
    sid = _create(client, algorithm="hmc", chains=1, options={"gradient_check": 0})
    (p,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    for _ in range(3):  # the initial point, then into the first trajectory
        value, gradient = _scaled(p["x"])
        told = {"id": p["id"], "log_density": value, "gradient": gradient}
        (p,) = client.post(f"/v1/sessions/{sid}/step", json={"results": [told]}).json()["proposals"]
    assert p["kind"] == "leapfrog" and p["step"] == 2
    released = client.post(
        f"/v1/sessions/{sid}/leases", json={"ids": [p["id"]], "lease_seconds": 0}
    )
    assert released.status_code == 200, released.text
    (again,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert (again["id"], again["x"]) == (p["id"], p["x"])
    value, gradient = _scaled(again["x"])
    answer = client.post(
        f"/v1/sessions/{sid}/tell",
        json={"results": [{"id": again["id"], "log_density": value, "gradient": gradient}]},
    ).json()
    assert answer["results"][0]["outcome"] == "step"


def test_nuts_records_stan_statistics_with_each_draw(client: TestClient) -> None:
    """Per transition, where Stan users look for them: ``sample_stats`` in JSON, the last
    columns in CSV; ``n_steps`` counts the gradient evaluations of each transition."""
    sid = _create(client, algorithm="nuts", chains=2, warmup=50, max_iterations=150)
    _run(client, sid, fn=_mild, batch=2)
    page = client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    summary = client.get(f"/v1/sessions/{sid}").json()
    for chain, counted in zip(page["chains"], summary["chain_summaries"], strict=True):
        stats = chain["sample_stats"]
        assert set(stats) == {"step_size", "tree_depth", "n_steps", "diverging", "energy"}
        assert all(len(v) == 150 for v in stats.values())
        steps = np.array(stats["n_steps"])
        depth = np.array(stats["tree_depth"])
        assert np.all(steps >= 1) and np.all(steps <= 2**depth)  # a tree of that depth
        assert set(stats["diverging"]) <= {0.0, 1.0}
        assert np.all(np.isfinite(stats["energy"]))
        # The initial point, the gradient check (chain 0: 2 points per coordinate), and
        # one gradient per leapfrog step.
        check = 6 if chain["chain"] == 0 else 0
        assert counted["evaluations"] == 1 + check + int(steps.sum())
    csv = client.get(f"/v1/sessions/{sid}/draws", params={"format": "csv"}).text
    header = csv.splitlines()[0].split(",")
    assert header[-5:] == ["stepsize__", "treedepth__", "n_leapfrog__", "divergent__", "energy__"]
    mala = _create(client, chains=1, max_iterations=20)
    _run(client, mala)
    mala_page = client.get(f"/v1/sessions/{mala}/draws").json()
    assert set(mala_page["chains"][0]["sample_stats"]) == {"step_size"}
    rwm = _create(client, algorithm="rwm", chains=1, max_iterations=20)
    _run(client, rwm, fn=lambda x: (_mild(x)[0], None))
    assert "sample_stats" not in client.get(f"/v1/sessions/{rwm}/draws").json()["chains"][0]


def test_divergent_transitions_are_warned(client: TestClient) -> None:
    """A step size far too large for the target, not adapted: every trajectory diverges,
    and the session's warnings say so (and no acceptance warning for NUTS)."""
    sid = _create(
        client,
        algorithm="nuts",
        chains=2,
        warmup=10,
        max_iterations=120,
        options={"step_size": 20.0, "adapt_step_size": False, "gradient_check": 0},
    )
    _run(client, sid, fn=_mild, batch=2)
    warnings = client.get(f"/v1/sessions/{sid}/diagnostics").json()["warnings"]
    codes = {w["code"] for w in warnings}
    assert "divergent" in codes
    divergent = next(w for w in warnings if w["code"] == "divergent")
    assert divergent["value"] > 100 and "diverged" in divergent["message"]
    assert not codes & {"acceptance_low", "acceptance_high"}
