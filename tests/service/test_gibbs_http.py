"""Gibbs blocks over HTTP, on every store: the client draws conditional blocks, the
service updates the others by Metropolis-Hastings; the posterior of a Bayesian linear
regression against its exact value; what is refused; exactly once; a replay bit for
bit.

The model (the regression of seed 004): ``y = X w + e``, ``e ~ N(0, 1 / tau)``, the
weights ``w ~ N(0, I / alpha)``, the precisions ``tau ~ Gamma(A, B)`` and
``alpha ~ Gamma(C, D)`` (shape, rate). Its parameters are ``(w_0, w_1, tau, alpha)``.
The weights given both precisions, and each precision given the weights, have closed
forms: the weights' and the noise precision's blocks are drawn by the client, the
weight precision by Metropolis-Hastings (so both kinds of step are in every sweep)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from kameleon.core.diagnostics.summary import ess_mean, per_parameter
from tests.service.conftest import ProblemCheck

Json = dict[str, Any]

_rng = np.random.default_rng(4)
N = 50
X = np.column_stack([np.ones(N), _rng.normal(size=N)])
W_TRUE = np.array([1.0, -0.5])
Y = X @ W_TRUE + _rng.normal(scale=0.5, size=N)  # noise precision 4
A, B, C, D = 1.0, 1.0, 1.0, 1.0
P = 2
XTX, XTY, YTY = X.T @ X, X.T @ Y, float(Y @ Y)

BLOCKS = [
    {"indices": [0, 1], "conditional": True},
    {"indices": [2], "conditional": True},
    {"indices": [3]},
]


def log_density(theta: np.ndarray) -> float:
    w, tau, alpha = theta[:2], theta[2], theta[3]
    if not (tau > 0 and alpha > 0):
        return -math.inf
    r = Y - X @ w
    return float(
        (N / 2 + A - 1) * math.log(tau)
        - tau * (B + 0.5 * r @ r)
        + (P / 2 + C - 1) * math.log(alpha)
        - alpha * (D + 0.5 * w @ w)
    )


def draw_weights(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``w | tau, alpha, y ~ N(S tau X'y, S)``, ``S = (alpha I + tau X'X)^-1``."""
    tau, alpha = theta[2], theta[3]
    cov = np.linalg.inv(alpha * np.eye(P) + tau * XTX)
    return rng.multivariate_normal(cov @ (tau * XTY), cov)


def draw_noise_precision(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``tau | w, y ~ Gamma(A + N / 2, B + |y - X w|^2 / 2)``."""
    r = Y - X @ theta[:2]
    return np.array([rng.gamma(A + N / 2, 1.0 / (B + 0.5 * float(r @ r)))])


DRAWS = {0: draw_weights, 1: draw_noise_precision}


def exact_weight_means() -> np.ndarray:
    """``E[w | y]`` by quadrature over ``(log tau, log alpha)``: given both precisions
    the weights are Gaussian with mean ``m = A^-1 tau X'y`` (``A = alpha I + tau X'X``),
    and the precisions' marginal posterior is, up to a constant,
    ``p(tau) p(alpha) tau^(N/2) alpha^(P/2) |A|^-1/2 exp(-tau y'y / 2 + b'A^-1 b / 2)``
    with ``b = tau X'y``. A 600 x 600 grid over +- 8 posterior sds of each log precision
    gives the means to about 1e-8, far below the tolerance of the test."""
    lt = np.linspace(math.log(4.0) - 3.0, math.log(4.0) + 3.0, 600)
    la = np.linspace(-9.0, 5.0, 600)
    log_tau, log_alpha = np.meshgrid(lt, la, indexing="ij")
    tau, alpha = np.exp(log_tau), np.exp(log_alpha)
    a11 = alpha + tau * XTX[0, 0]
    a22 = alpha + tau * XTX[1, 1]
    a12 = tau * XTX[0, 1]
    det = a11 * a22 - a12 * a12
    b1, b2 = tau * XTY[0], tau * XTY[1]
    m1 = (a22 * b1 - a12 * b2) / det
    m2 = (a11 * b2 - a12 * b1) / det
    log_post = (
        (A - 1) * log_tau
        - B * tau
        + (C - 1) * log_alpha
        - D * alpha
        + (N / 2) * log_tau
        + (P / 2) * log_alpha
        - 0.5 * np.log(det)
        - 0.5 * tau * YTY
        + 0.5 * (b1 * m1 + b2 * m2)
        + log_tau  # the Jacobians of the log scales
        + log_alpha
    )
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    return np.array([(weight * m1).sum(), (weight * m2).sum()])


def _create(api: TestClient, **fields: Any) -> str:
    body = {
        "algorithm": "gibbs",
        "dim": 4,
        "chains": 4,
        "seed": 21,
        "warmup": 100,
        "max_iterations": 600,
        "initial": [0.0, 0.0, 1.0, 1.0],
        "initial_radius": 0.5,
        "options": {"blocks": BLOCKS},
        **fields,
    }
    response = api.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def _answer(p: Json) -> Json:
    """The client's result for a proposal: a conditional block drawn with a generator
    seeded by the proposal's place (so that a replay draws the same), and the log
    density at the point it makes; every other point's log density."""
    x = np.array(p["x"])
    if p["kind"] != "conditional":
        return {"id": p["id"], "log_density": _json(log_density(x))}
    rng = np.random.default_rng([p["chain"], p["iteration"], p["step"]])
    draw = DRAWS[p["block"]](x, rng)
    x[p["indices"]] = draw
    return {"id": p["id"], "draw": draw.tolist(), "log_density": log_density(x)}


def _json(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _run(api: TestClient, sid: str) -> list[Json]:
    proposals = api.post(f"/v1/sessions/{sid}/ask", json={"max": 8}).json()["proposals"]
    seen: list[Json] = []
    while proposals:
        answer = api.post(
            f"/v1/sessions/{sid}/step",
            json={"results": [_answer(p) for p in proposals], "max": 8},
        )
        assert answer.status_code == 200, answer.text
        seen += proposals
        proposals = answer.json()["proposals"]
    return seen


def test_the_client_draws_conditional_blocks_and_the_posterior_is_right(
    client: TestClient,
) -> None:
    """The weights' posterior means within 4 Monte Carlo standard errors of the exact
    ones (a false alarm about 1 in 16 000 per comparison under a normal approximation);
    the standard error from the chains' own autocorrelations (split-chain ESS)."""
    sid = _create(client)
    seen = _run(client, sid)
    kinds = {(p["kind"], p["step"], p["block"]) for p in seen if p["iteration"]}
    assert kinds == {("conditional", 0, 0), ("conditional", 1, 1), ("proposal", 2, None)}
    for p in seen:
        if p["kind"] == "conditional":
            assert p["indices"] == BLOCKS[p["block"]]["indices"]
            assert p["id"].endswith(f".s{p['step']}") == (p["step"] > 0)
        else:
            assert p["indices"] is None
    page = client.get(f"/v1/sessions/{sid}/draws").json()
    draws = np.array([c["draws"] for c in page["chains"]])  # (4, 500, 4)
    assert draws.shape == (4, 500, 4)
    assert np.all(draws[..., 2:] > 0)  # the precisions stay in their support
    w = draws[..., :2]
    ess = per_parameter(ess_mean, w)
    mcse = w.std(axis=(0, 1)) / np.sqrt(ess)
    exact = exact_weight_means()
    mean = w.mean(axis=(0, 1))
    print({"mean": mean.tolist(), "exact": exact.tolist(), "mcse": mcse.tolist()})
    assert np.all(ess > 500), ess
    assert np.all(np.abs(mean - exact) < 4 * mcse), (mean, exact, mcse)
    summary = client.get(f"/v1/sessions/{sid}").json()
    assert summary["status"] == "done"
    # A sweep is three evaluations: each chain's are counted, its initial point's too.
    assert all(c["evaluations"] >= 3 * 600 + 1 for c in summary["chain_summaries"])


def test_a_replay_gives_the_same_bits(client: TestClient) -> None:
    pages = []
    for _ in range(2):
        sid = _create(client, max_iterations=30, warmup=10)
        _run(client, sid)
        pages.append(
            client.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
        )
    assert pages[0]["chains"] == pages[1]["chains"]


def _first_conditional(api: TestClient) -> tuple[str, Json]:
    sid = _create(api, chains=1, initial_radius=None)
    (init,) = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert init["kind"] == "init" and init["block"] is None and init["indices"] is None
    told = api.post(f"/v1/sessions/{sid}/tell", json={"results": [_answer(init)]})
    assert told.json()["results"][0]["outcome"] == "initialized"
    (p,) = api.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert (p["kind"], p["block"], p["indices"], p["step"]) == ("conditional", 0, [0, 1], 0)
    assert p["x"] == [0.0, 0.0, 1.0, 1.0]
    return sid, p


def test_a_conditional_result_that_does_not_fit_is_refused(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid, p = _first_conditional(client)
    good = _answer(p)
    cases = [
        ({"draw": None}, "results.0.draw", "needs the block's draw"),
        ({"draw": [1.0]}, "results.0.draw", "must have 2 values"),
        ({"draw": [1.0, 2.0, 3.0]}, "results.0.draw", "must have 2 values"),
        ({"draw": [1.0, "x"]}, "results.0.draw.1", "must be a number"),
        ({"draw": [1.0, 10**400]}, "results.0.draw", "finite"),
        ({"log_density": None}, "results.0.log_density", "finite"),
        ({"log_density": "-inf"}, "results.0.log_density", "finite"),
    ]
    for change, field, words in cases:
        result = {k: v for k, v in {**good, **change}.items() if v is not None or k != "draw"}
        body = assert_problem(
            client.post(f"/v1/sessions/{sid}/tell", json={"results": [result]}), 422
        )
        assert words in body["detail"], body
        assert body["field"] == field, body
    # A non-finite number, as the service's JSON reader takes one.
    raw = '{"results": [{"id": "' + p["id"] + '", "draw": [1.0, Infinity], "log_density": -3.0}]}'
    body = assert_problem(
        client.post(
            f"/v1/sessions/{sid}/tell",
            content=raw,
            headers={"content-type": "application/json"},
        ),
        422,
    )
    assert body["field"] == "results.0.draw.1", body
    # Nothing was applied: the chain still waits for this draw.
    told = client.post(f"/v1/sessions/{sid}/tell", json={"results": [good]}).json()
    assert told["results"][0]["outcome"] == "step"


def test_a_draw_on_any_other_proposal_is_refused(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid, p = _first_conditional(client)
    assert (
        client.post(f"/v1/sessions/{sid}/tell", json={"results": [_answer(p)]}).status_code == 200
    )
    (q,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert q["kind"] == "conditional" and q["block"] == 1
    client.post(f"/v1/sessions/{sid}/tell", json={"results": [_answer(q)]})
    (mh,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert mh["kind"] == "proposal" and mh["step"] == 2 and mh["block"] is None
    result = {**_answer(mh), "draw": [1.0]}
    body = assert_problem(client.post(f"/v1/sessions/{sid}/tell", json={"results": [result]}), 422)
    assert body["field"] == "results.0.draw" and "only a proposal of kind conditional" in str(body)
    # Another algorithm refuses a draw too.
    other = client.post("/v1/sessions", json={"algorithm": "am", "dim": 2, "chains": 1}).json()
    (init,) = client.post(f"/v1/sessions/{other['id']}/ask", json={"max": 1}).json()["proposals"]
    assert init["block"] is None and init["indices"] is None
    bad = {"id": init["id"], "log_density": -1.0, "draw": [0.0]}
    body = assert_problem(
        client.post(f"/v1/sessions/{other['id']}/tell", json={"results": [bad]}), 422
    )
    assert body["field"] == "results.0.draw"


def test_a_conditional_result_is_applied_exactly_once(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    sid, p = _first_conditional(client)
    good = _answer(p)
    first = client.post(f"/v1/sessions/{sid}/tell", json={"results": [good]}).json()
    assert first["results"][0]["outcome"] == "step"
    again = client.post(f"/v1/sessions/{sid}/tell", json={"results": [good]}).json()
    assert again["results"][0]["outcome"] == "duplicate"
    other_draw = {**good, "draw": [good["draw"][0] + 0.5, good["draw"][1]]}
    other_value = {**good, "log_density": good["log_density"] - 1.0}
    for changed in (other_draw, other_value):
        body = assert_problem(
            client.post(f"/v1/sessions/{sid}/tell", json={"results": [changed]}), 409
        )
        assert body["ids"] == [p["id"]] and "another value" in body["detail"], body
    # Twice in one request, with different draws: 409, nothing applied.
    (q,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    twice = [_answer(q), {**_answer(q), "draw": [0.5]}]
    assert_problem(client.post(f"/v1/sessions/{sid}/tell", json={"results": twice}), 409)
    told = client.post(f"/v1/sessions/{sid}/tell", json={"results": [_answer(q)]}).json()
    assert told["results"][0]["outcome"] == "step"
    # The rest of the sweep; the first draw is still compared after it ends.
    (r,) = client.post(f"/v1/sessions/{sid}/ask", json={"max": 1}).json()["proposals"]
    assert r["kind"] == "proposal"
    client.post(f"/v1/sessions/{sid}/tell", json={"results": [_answer(r)]})
    assert client.get(f"/v1/sessions/{sid}").json()["chain_summaries"][0]["iterations"] == 1
    retry = client.post(f"/v1/sessions/{sid}/tell", json={"results": [good]}).json()
    assert retry["results"][0]["outcome"] == "duplicate"
    assert_problem(client.post(f"/v1/sessions/{sid}/tell", json={"results": [other_draw]}), 409)


def test_blocks_are_checked_at_creation(client: TestClient, assert_problem: ProblemCheck) -> None:
    for blocks, field in [
        ([{"indices": [0, 1]}, {"indices": [1, 2, 3]}], "options.blocks.1.indices.0"),
        ([{"indices": [0, 1]}, {"indices": [3]}], "options.blocks"),
        ([{"indices": [0, 1, 2, 4]}], "options.blocks.0.indices.3"),
        ([{"indices": []}, {"indices": [0, 1, 2, 3]}], "options.blocks.0.indices"),
        ([{"indices": [0, 1, 2, 3], "speed": 0}], "options.blocks.0.speed"),
    ]:
        response = client.post(
            "/v1/sessions",
            json={"algorithm": "gibbs", "dim": 4, "chains": 1, "options": {"blocks": blocks}},
        )
        body = assert_problem(response, 422)
        assert body["field"] == field, body


def test_pseudo_marginal_is_refused_with_conditional_blocks(
    client: TestClient, assert_problem: ProblemCheck
) -> None:
    body = {"algorithm": "gibbs", "dim": 4, "chains": 1, "pseudo_marginal": True}
    refused = client.post("/v1/sessions", json={**body, "options": {"blocks": BLOCKS}})
    assert assert_problem(refused, 422)["field"] == "pseudo_marginal"
    # Every block by Metropolis-Hastings keeps the estimate, as the other samplers do.
    assert client.post("/v1/sessions", json=body).status_code == 201


def test_a_conditional_result_may_be_told_in_parts(client: TestClient) -> None:
    """The value at the drawn point as log prior plus log likelihood, as any value."""
    sid, p = _first_conditional(client)
    good = _answer(p)
    parts = {
        "id": good["id"],
        "draw": good["draw"],
        "log_prior": good["log_density"] - 10.0,
        "log_likelihood": 10.0,
    }
    told = client.post(f"/v1/sessions/{sid}/tell", json={"results": [parts]}).json()
    assert told["results"][0]["outcome"] == "step"
    again = client.post(f"/v1/sessions/{sid}/tell", json={"results": [parts]}).json()
    assert again["results"][0]["outcome"] == "duplicate"  # the same value and draw
