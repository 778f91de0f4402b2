"""A target told as a log prior and a log likelihood apart, on every store: the value is
``prior_power * log_prior + log_likelihood`` for every algorithm, gradients too; a told
``log_density`` must agree; what is refused, and that nothing told before is lost."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]
DATA = np.array([[0.5, -1.0], [1.5, 0.0], [1.0, -2.0]])


def _prior(x: np.ndarray) -> tuple[float, np.ndarray]:
    """N(0, 3^2 I)."""
    return -0.5 * float(x @ x) / 9, -x / 9


def _likelihood(x: np.ndarray) -> tuple[float, np.ndarray]:
    """Each row of DATA ~ N(x, I)."""
    r = DATA - x
    return -0.5 * float((r * r).sum()), r.sum(axis=0)


def _parts(p: Json, gradients: bool = False) -> Json:
    x = np.asarray(p["x"])
    (lp, gp), (ll, gl) = _prior(x), _likelihood(x)
    out: Json = {"id": p["id"], "log_prior": lp, "log_likelihood": ll}
    if gradients:
        out |= {"prior_gradient": gp.tolist(), "gradient": gl.tolist()}
    return out


def _whole(p: Json, power: float, gradients: bool = False) -> Json:
    """The same target told as one value, the prior raised to ``power`` by the client."""
    x = np.asarray(p["x"])
    (lp, gp), (ll, gl) = _prior(x), _likelihood(x)
    out: Json = {"id": p["id"], "log_density": power * lp + ll}
    if gradients:
        out["gradient"] = (power * gp + gl).tolist()
    return out


def _refused(assert_problem: ProblemCheck, response: Any, field: str) -> None:
    """A 422 problem document whose errors name ``field``."""
    body = assert_problem(response, 422)
    assert field in [e["field"] for e in body["errors"]], body


def _create(api: TestClient, **fields: Any) -> str:
    body = {"algorithm": "am", "dim": 2, "chains": 2, "seed": 5, "warmup": 5, **fields}
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _run(api: TestClient, sid: str, tell: Any, steps: int) -> list[Json]:
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()["proposals"]
    outcomes: list[Json] = []
    for _ in range(steps):
        if not proposals:
            break
        answer = api.post(
            f"/v1/sessions/{sid}/step",
            json={"results": [tell(p) for p in proposals], "max": 8},
        )
        assert answer.status_code == 200, answer.text
        outcomes += answer.json()["results"]
        proposals = answer.json()["proposals"]
    return outcomes


def _draws(api: TestClient, sid: str) -> Json:
    page = api.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"})
    assert page.status_code == 200, page.text
    return page.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("algorithm", "gradients"), [("am", False), ("rwm", False), ("nuts", True), ("mala", True)]
)
@pytest.mark.parametrize("power", [1.0, 0.25])
def test_parts_give_the_draws_of_the_value_they_stand_for(
    module_client: TestClient, algorithm: str, gradients: bool, power: float
) -> None:
    # Two sessions of the same seed, one told in parts and one told the value
    # (prior_power * log_prior + log_likelihood, and its gradient) worked out by the
    # client: the same draws, bit for bit.
    api = module_client
    fields = {"algorithm": algorithm, "prior_power": power, "max_iterations": 30}
    parted, whole = _create(api, **fields), _create(api, **fields)
    _run(api, parted, lambda p: _parts(p, gradients), 400)
    _run(api, whole, lambda p: _whole(p, power, gradients), 400)
    a, b = _draws(api, parted), _draws(api, whole)
    assert [c["iterations"] for c in a["chains"]] == [list(range(1, 31))] * 2
    assert a["chains"] == b["chains"]
    summary = api.get(f"/v1/sessions/{parted}").json()
    assert summary["prior_power"] == power
    for chain in a["chains"]:
        for x, logp in zip(chain["draws"], chain["log_density"], strict=True):
            expected = _whole({"id": "", "x": x}, power)["log_density"]
            assert logp == pytest.approx(expected, rel=1e-12)


def test_a_retry_in_parts_is_a_duplicate_when_its_value_is_the_same(
    module_client: TestClient,
) -> None:
    api = module_client
    sid = _create(api, chains=1)
    p = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"][0]
    first = _parts(p)
    assert api.post(f"/v1/sessions/{sid}/tell", json={"results": [first]}).status_code == 200
    again = api.post(f"/v1/sessions/{sid}/tell", json={"results": [first]})
    assert again.json()["results"][0]["outcome"] == "duplicate"
    # The same value told whole is the same result; the value is what is recorded.
    whole = {"id": p["id"], "log_density": first["log_prior"] + first["log_likelihood"]}
    same = api.post(f"/v1/sessions/{sid}/tell", json={"results": [whole]})
    assert same.json()["results"][0]["outcome"] == "duplicate"
    other = {**first, "log_likelihood": first["log_likelihood"] - 1.0}
    assert api.post(f"/v1/sessions/{sid}/tell", json={"results": [other]}).status_code == 409


def test_a_log_density_that_disagrees_with_its_parts_is_refused(
    module_client: TestClient, assert_problem: ProblemCheck
) -> None:
    api = module_client
    sid = _create(api, chains=1, prior_power=0.5)
    p = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"][0]
    parts = _parts(p)
    value = 0.5 * parts["log_prior"] + parts["log_likelihood"]
    wrong = {**parts, "log_density": parts["log_prior"] + parts["log_likelihood"]}
    _refused(
        assert_problem,
        api.post(f"/v1/sessions/{sid}/tell", json={"results": [wrong]}),
        "results.0.log_density",
    )
    # Nothing was applied: the proposal is still outstanding, and the right sum is taken.
    assert api.get(f"/v1/sessions/{sid}").json()["evaluations"] == 0
    right = {**parts, "log_density": value}
    told = api.post(f"/v1/sessions/{sid}/tell", json={"results": [right]})
    assert told.status_code == 200, told.text
    assert told.json()["results"][0]["outcome"] == "initialized"


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({"log_likelihood": -1.0}, "results.0.log_prior"),
        ({"log_prior": -1.0}, "results.0.log_likelihood"),
        ({"log_prior": -1e308, "log_likelihood": -1e308}, "results.0.log_likelihood"),
    ],
)
def test_half_a_target_is_refused_naming_the_missing_part(
    module_client: TestClient, assert_problem: ProblemCheck, result: Json, field: str
) -> None:
    api = module_client
    sid = _create(api, chains=1)
    p = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"][0]
    _refused(
        assert_problem,
        api.post(f"/v1/sessions/{sid}/tell", json={"results": [{"id": p["id"], **result}]}),
        field,
    )
    assert api.get(f"/v1/sessions/{sid}").json()["evaluations"] == 0


def test_a_log_prior_of_minus_infinity_needs_nothing_else(module_client: TestClient) -> None:
    api = module_client
    sid = _create(api, chains=1, initial=[[0.0, 0.0]])
    p = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"][0]
    told = api.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{"id": p["id"], "log_prior": "-inf"}]}
    )
    assert told.status_code == 200, told.text
    assert told.json()["results"][0]["outcome"] == "outside_support"


def test_a_gradient_sampler_told_in_parts_needs_the_priors_gradient_when_it_is_tempered(
    module_client: TestClient, assert_problem: ProblemCheck
) -> None:
    api = module_client
    sid = _create(api, algorithm="nuts", chains=1, prior_power=0.5)
    p = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"][0]
    without = _parts(p, gradients=True)
    del without["prior_gradient"]
    _refused(
        assert_problem,
        api.post(f"/v1/sessions/{sid}/tell", json={"results": [without]}),
        "results.0.prior_gradient",
    )
    short = {**_parts(p, gradients=True), "prior_gradient": [1.0]}
    _refused(
        assert_problem,
        api.post(f"/v1/sessions/{sid}/tell", json={"results": [short]}),
        "results.0.prior_gradient",
    )
    told = api.post(f"/v1/sessions/{sid}/tell", json={"results": [_parts(p, gradients=True)]})
    assert told.status_code == 200, told.text


@pytest.mark.parametrize("power", [0, -0.5, 1.5, "half"])
def test_a_prior_power_out_of_range_is_refused(
    module_client: TestClient, assert_problem: ProblemCheck, power: Any
) -> None:
    body = {"algorithm": "am", "dim": 2, "prior_power": power}
    _refused(assert_problem, module_client.post("/v1/sessions", json=body), "prior_power")
