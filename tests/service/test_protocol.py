"""Conformance: one test per statement of PROTOCOL.md, over HTTP, on both stores.

Each test quotes the statement it checks. The other HTTP tests go deeper into each
feature; this module is the checklist a client author can read against the protocol.
"""

from __future__ import annotations

import io
import json
import math
import time
from typing import Any
from urllib.parse import urljoin

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import ProblemCheck

Json = dict[str, Any]


@pytest.fixture
def api(module_client: TestClient) -> TestClient:
    return module_client


@pytest.fixture
def sessions(api: TestClient) -> Any:
    """``new(**fields)``: create a session (a 2-d rwm with 2 chains unless told
    otherwise); every session is deleted after the test."""
    made: list[str] = []

    def new(**fields: Any) -> Json:
        body = {"algorithm": "rwm", "dim": 2, "chains": 2, "seed": 3, "warmup": 2, **fields}
        response = api.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
        made.append(response.json()["id"])
        summary: Json = response.json()
        return summary

    yield new
    for sid in made:
        api.delete(f"/v1/sessions/{sid}")


def post(api: TestClient, sid: str, verb: str, body: Any, status: int = 200) -> Json:
    response = api.post(f"/v1/sessions/{sid}/{verb}", json=body)
    assert response.status_code == status, response.text
    answer: Json = response.json()
    return answer


def ask(api: TestClient, sid: str, **body: Any) -> list[Json]:
    proposals: list[Json] = post(api, sid, "ask", body)["proposals"]
    return proposals


def tell(api: TestClient, sid: str, *results: Json, status: int = 200) -> Json:
    return post(api, sid, "tell", {"results": list(results)}, status)


def value(p: Json) -> Json:
    """The told result of a standard normal at proposal ``p``."""
    return {"id": p["id"], "log_density": -0.5 * sum(v * v for v in p["x"])}


def state(api: TestClient, sid: str) -> tuple[Json, Json]:
    """Everything a request can change: the summary and every draw."""
    summary = api.get(f"/v1/sessions/{sid}").json()
    draws = api.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    return summary, draws


def started(api: TestClient, sid: str) -> list[Json]:
    """Tell every initial point; the chains' first proposals, leased."""
    inits = ask(api, sid, max=64)
    tell(api, sid, *(value(p) for p in inits))
    return ask(api, sid, max=64)


# ---------------------------------------------------------------------------- words


def test_a_create_takes_the_shared_defaults(api: TestClient) -> None:
    """'"chains": 4, // default 4', '"warmup": 1000, ... (default 1000)', '"max_iterations":
    ... absent: warmup + 2000 (2000 draws kept per chain); null: no limit'."""
    from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP

    made = []
    for body, want in (
        ({"dim": 2}, WARMUP + ITERATIONS),
        ({"dim": 2, "warmup": 10}, 10 + ITERATIONS),
        ({"dim": 2, "max_iterations": None}, None),
        ({"dim": 2, "max_iterations": 7}, 7),
    ):
        response = api.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
        summary = response.json()
        made.append(summary["id"])
        assert summary["chains"] == CHAINS
        assert summary["warmup"] == body.get("warmup", WARMUP)
        assert summary["max_iterations"] == want, body
    for sid in made:
        api.delete(f"/v1/sessions/{sid}")


def test_a_flat_initial_is_one_row_for_every_chain(api: TestClient, sessions: Any) -> None:
    """'(a flat list [0, 0, ...] is that one row)'."""
    sid = sessions(chains=3, initial=[0.5, -0.5])["id"]
    firsts = ask(api, sid, max=10)
    assert [p["x"] for p in firsts] == [[0.5, -0.5]] * 3
    wrong = api.post("/v1/sessions", json={"dim": 2, "initial": [0.5, -0.5, 1.0]})
    assert wrong.status_code == 422 and "initial" in wrong.text


def test_each_chain_has_at_most_one_proposal_outstanding(api: TestClient, sessions: Any) -> None:
    """'Each chain has at most one proposal outstanding. Its id names the chain and the
    iteration it belongs to.'"""
    sid = sessions(chains=3)["id"]
    first = ask(api, sid, max=10)
    assert sorted(p["chain"] for p in first) == [0, 1, 2]
    assert ask(api, sid, max=10) == []  # all leased
    for p in first:
        assert p["id"] == f"c{p['chain']}.i{p['iteration']}"


def test_an_expired_lease_hands_out_the_same_proposal(api: TestClient, sessions: Any) -> None:
    """'When [the lease] runs out, the same proposal (same id, same point) is handed out
    again.'"""
    sid = sessions(chains=1)["id"]
    (first,) = ask(api, sid, lease_seconds=0.05)
    time.sleep(0.1)
    (again,) = ask(api, sid)
    assert (again["id"], again["x"]) == (first["id"], first["x"])


def test_lease_edge_cases(api: TestClient, sessions: Any, assert_problem: ProblemCheck) -> None:
    """A late tell after the lease ran out and another worker answered: 409, the first
    value stands. A late tell after the lease ran out that nobody answered: applied. A
    duplicate: nothing changes."""
    sid = sessions(chains=1)["id"]
    (init,) = ask(api, sid)
    tell(api, sid, value(init))
    (slow,) = ask(api, sid, lease_seconds=0.05)
    time.sleep(0.1)
    (fast,) = ask(api, sid)  # the lease ran out: the same proposal, to another worker
    assert (fast["id"], fast["x"]) == (slow["id"], slow["x"])
    first = tell(api, sid, {"id": fast["id"], "log_density": -1.0})
    before = state(api, sid)
    response = api.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{"id": slow["id"], "log_density": -2.0}]}
    )
    assert assert_problem(response, 409)["ids"] == [slow["id"]]
    assert state(api, sid) == before  # the first value stands
    again = tell(api, sid, {"id": fast["id"], "log_density": -1.0})
    assert again["results"][0]["outcome"] == "duplicate" and state(api, sid) == before
    assert first["results"][0]["outcome"] in ("accepted", "rejected")

    (late,) = ask(api, sid, lease_seconds=0.05)
    time.sleep(0.1)  # the lease runs out, and nobody asks meanwhile
    applied = tell(api, sid, value(late))
    assert applied["results"][0]["outcome"] in ("accepted", "rejected")


def test_every_answer_carries_next_lease_expires_at(api: TestClient, sessions: Any) -> None:
    """'Every ask and step answer carries `next_lease_expires_at`: in an answer with no
    proposals in a session that is not done, when the first running lease runs out ...,
    else null.'"""
    sid = sessions(chains=1)["id"]
    handed = post(api, sid, "ask", {"max": 1, "lease_seconds": 30})
    assert handed["proposals"] and handed["next_lease_expires_at"] is None
    empty = post(api, sid, "ask", {"max": 1})
    assert empty["proposals"] == [] and empty["next_lease_expires_at"] is not None
    stepped = post(api, sid, "step", {"results": [value(handed["proposals"][0])]})
    assert stepped["proposals"] and stepped["next_lease_expires_at"] is None


def test_a_retry_is_known_by_its_request_id_whatever_its_body(
    api: TestClient, sessions: Any
) -> None:
    """'Request ids are per session, and one namespace for ask and step ... the results
    it carries are told as in any request ..., and it hands out only what the first
    request leased and still holds, never further proposals, whatever its `max`.'"""
    sid = sessions(chains=3)["id"]
    first = post(api, sid, "ask", {"max": 2, "request_id": "r-1"})["proposals"]
    assert len(first) == 2
    retry = post(api, sid, "step", {"results": [value(first[0])], "max": 3, "request_id": "r-1"})
    assert [r["outcome"] for r in retry["results"]] == ["initialized"]
    # The told chain's next proposal and the other one r-1 still holds; never chain 2.
    assert sorted(p["chain"] for p in retry["proposals"]) == sorted(p["chain"] for p in first)
    other = sessions(chains=1)["id"]  # the same id in another session is another request
    assert len(post(api, other, "ask", {"max": 1, "request_id": "r-1"})["proposals"]) == 1


def test_an_unseeded_session_draws_a_seed_exact_in_json(api: TestClient, sessions: Any) -> None:
    """An unseeded session draws a seed below 2**53, which every JSON reader gives back
    exactly (openapi.yaml, SessionCreate.seed)."""
    made = [api.post("/v1/sessions", json={"dim": 1}).json() for _ in range(20)]
    try:
        assert all(0 <= m["seed"] < 2**53 for m in made)
    finally:
        for m in made:
            api.delete(f"/v1/sessions/{m['id']}")


# ------------------------------------------------------------------- creating a session


def test_the_first_proposal_is_the_initial_point(api: TestClient, sessions: Any) -> None:
    """'Every chain's first proposal is its initial point ("kind": "init").'"""
    sid = sessions(initial=[[0.5, -0.5]])["id"]
    proposals = ask(api, sid, max=2)
    assert all(p["kind"] == "init" and p["x"] == [0.5, -0.5] for p in proposals)
    assert all(p["iteration"] == 0 for p in proposals)


def test_an_initial_point_outside_the_support_is_redrawn(api: TestClient, sessions: Any) -> None:
    """'An initial point whose log density is -inf gets the outcome outside_support (with
    its chain). Without a user-given initial, the service draws a new over-dispersed
    starting point and asks for it.'"""
    sid = sessions(chains=1)["id"]
    (init,) = ask(api, sid)
    answer = tell(api, sid, {"id": init["id"], "log_density": None})
    assert answer["results"] == [{"id": init["id"], "chain": 0, "outcome": "outside_support"}]
    (redraw,) = ask(api, sid)
    assert redraw["kind"] == "init" and redraw["x"] != init["x"]
    assert redraw["id"] != init["id"]


def test_a_given_initial_point_outside_the_support_waits_for_a_reset(
    api: TestClient, sessions: Any
) -> None:
    """'With [a user-given initial], the chain's status is needs_initial_point until
    POST /v1/sessions/{id}/chains/{chain}/reset gives it a new one.'"""
    sid = sessions(chains=1, initial=[[1.0, 1.0]])["id"]
    (init,) = ask(api, sid)
    tell(api, sid, {"id": init["id"], "log_density": "-inf"})
    assert api.get(f"/v1/sessions/{sid}").json()["status"] == "needs_initial_point"
    assert ask(api, sid) == []
    reset = api.post(f"/v1/sessions/{sid}/chains/0/reset", json={"initial": [0.0, 0.0]})
    assert reset.status_code == 200, reset.text
    (again,) = ask(api, sid)
    assert again["kind"] == "init" and again["x"] == [0.0, 0.0]


# ---------------------------------------------------------------------- ask, tell, step


@pytest.mark.parametrize("spelling", [None, "-inf", "-Infinity", "bare"])
def test_outside_the_support_has_portable_spellings(
    api: TestClient, sessions: Any, spelling: str | None
) -> None:
    """'log_density is a number, or null for a point outside the support; "-inf" and the
    bare -Infinity are also accepted.'"""
    sid = sessions(chains=1)["id"]
    (p,) = started(api, sid)
    if spelling == "bare":
        raw = '{"results": [{"id": "' + p["id"] + '", "log_density": -Infinity}]}'
        response = api.post(f"/v1/sessions/{sid}/tell", content=raw)
    else:
        body = {"results": [{"id": p["id"], "log_density": spelling}]}
        response = api.post(f"/v1/sessions/{sid}/tell", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["outcome"] == "rejected"


@pytest.mark.parametrize("bad", ["NaN", "Infinity", '"x"', "[1.0]", "true"])
def test_nan_inf_and_non_numbers_are_refused_and_change_nothing(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck, bad: str
) -> None:
    """'NaN, +inf, a wrong length, a non-number: 422, and the session is unchanged.'"""
    sid = sessions(chains=1)["id"]
    (p,) = started(api, sid)
    before = state(api, sid)
    raw = '{"results": [{"id": "' + p["id"] + '", "log_density": ' + bad + "}]}"
    response = api.post(f"/v1/sessions/{sid}/tell", content=raw)
    assert_problem(response, 422)
    assert state(api, sid) == before


def test_results_come_back_in_request_order(api: TestClient, sessions: Any) -> None:
    """'Results come back in request order, each with its id and chain.'"""
    sid = sessions(chains=4)["id"]
    proposals = started(api, sid)[::-1]
    answer = tell(api, sid, *(value(p) for p in proposals))
    assert [(r["id"], r["chain"]) for r in answer["results"]] == [
        (p["id"], p["chain"]) for p in proposals
    ]
    assert {r["outcome"] for r in answer["results"]} <= {"accepted", "rejected"}


def test_a_retold_result_is_a_duplicate_and_changes_nothing(api: TestClient, sessions: Any) -> None:
    """'Telling an id that was already applied, with the same value, returns "duplicate"
    and changes nothing.'"""
    sid = sessions()["id"]
    proposals = started(api, sid)
    tell(api, sid, *(value(p) for p in proposals))
    before = state(api, sid)
    again = tell(api, sid, *(value(p) for p in proposals))
    assert [r["outcome"] for r in again["results"]] == ["duplicate"] * len(proposals)
    assert state(api, sid) == before


def test_a_conflicting_value_is_a_409_and_the_first_stands(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'The same id with a different value: 409; the first value stands.' 'A 409 refuses
    the whole request and applies nothing; its problem body lists the offending ids in
    ids.'"""
    sid = sessions()["id"]
    first, second = started(api, sid)
    tell(api, sid, value(first))
    before = state(api, sid)
    late = {"id": first["id"], "log_density": value(first)["log_density"] + 1.0}
    response = api.post(f"/v1/sessions/{sid}/tell", json={"results": [value(second), late]})
    problem = assert_problem(response, 409)
    assert problem["ids"] == [first["id"]]
    assert problem["errors"] == [{"id": first["id"], "message": problem["detail"]}]
    assert "told before with another value" in problem["detail"]
    assert state(api, sid) == before  # the good result beside it was not applied either


@pytest.mark.parametrize("never", ["c0.i99", "c7.i1", "c0.e5.i0"])
def test_an_id_never_issued_is_a_409(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck, never: str
) -> None:
    """'Telling an id that the chain never issued, or that a reset made obsolete: 409.'"""
    sid = sessions()["id"]
    started(api, sid)
    before = state(api, sid)
    response = api.post(
        f"/v1/sessions/{sid}/tell", json={"results": [{"id": never, "log_density": -1.0}]}
    )
    problem = assert_problem(response, 409)
    assert problem["ids"] == [never] and "not outstanding" in problem["errors"][0]["message"]
    assert state(api, sid) == before


def test_an_id_not_of_the_services_form_is_a_422(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'An id that is not of the form the service gives out (`zzz`, `c0`) is invalid
    input: 422 naming `results.N.id`.'"""
    sid = sessions()["id"]
    body = {"results": [{"id": "zzz", "log_density": -1.0}]}
    problem = assert_problem(api.post(f"/v1/sessions/{sid}/tell", json=body), 422)
    assert problem["errors"][0]["field"] == "results.0.id"


def test_one_bad_result_fails_the_whole_batch_before_anything_is_applied(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'A batch is applied result by result; one bad result fails the whole request with
    422 before anything is applied.'"""
    sid = sessions()["id"]
    first, second = started(api, sid)
    before = state(api, sid)
    raw = json.dumps({"results": [value(first), {"id": second["id"], "log_density": "oops"}]})
    assert_problem(api.post(f"/v1/sessions/{sid}/tell", content=raw), 422)
    assert state(api, sid) == before


def test_an_id_told_twice_in_one_request(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'An id told twice in one request with the same value is applied once (the second
    answers `duplicate`); with different values, 409.'"""
    sid = sessions()["id"]
    first, second = started(api, sid)
    before = state(api, sid)
    other = {"id": first["id"], "log_density": value(first)["log_density"] - 1.0}
    body = {"results": [value(first), other]}
    problem = assert_problem(api.post(f"/v1/sessions/{sid}/tell", json=body), 409)
    assert "twice" in problem["detail"] and problem["ids"] == [first["id"]]
    assert state(api, sid) == before
    answer = tell(api, sid, value(second), value(second))
    assert [r["outcome"] for r in answer["results"]][1] == "duplicate"


def test_pseudo_marginal_sessions_never_ask_for_the_current_state(
    api: TestClient, sessions: Any
) -> None:
    """'In a pseudo-marginal session the current state's estimate is kept and never asked
    for again; only proposals are evaluated.'"""
    sid = sessions(chains=1, pseudo_marginal=True, warmup=0)["id"]
    (init,) = ask(api, sid)
    tell(api, sid, {"id": init["id"], "log_density": 0.0})
    current = init["x"]
    for _ in range(30):
        (p,) = ask(api, sid)
        assert p["kind"] == "proposal" and p["x"] != current
        # A noisy estimate: accepted points keep the value told for them.
        outcome = tell(api, sid, value(p))["results"][0]["outcome"]
        if outcome == "accepted":
            current = p["x"]
    draws = api.get(f"/v1/sessions/{sid}/draws").json()["chains"][0]
    assert draws["draws"][-1] == current


def test_a_gradient_is_ignored_unchecked_by_gradient_free_algorithms(
    api: TestClient, sessions: Any
) -> None:
    """'Algorithms that use gradients take "gradient": [...] beside log_density; the
    others ignore it, unchecked.'"""
    sid = sessions()["id"]
    first, second = started(api, sid)
    answer = tell(
        api,
        sid,
        {**value(first), "gradient": [1.0]},  # the wrong length: not looked at
        {**value(second), "gradient": [0.0, 0.0, 0.0, 0.0]},
    )
    assert [r["outcome"] in ("accepted", "rejected") for r in answer["results"]] == [True, True]


def test_step_tells_then_asks(api: TestClient, sessions: Any) -> None:
    """'POST /v1/sessions/{id}/step: tell, then ask, in one round trip.'"""
    sid = sessions(chains=1)["id"]
    (p,) = started(api, sid)
    answer = post(api, sid, "step", {"results": [value(p)], "max": 1})
    assert answer["results"][0]["id"] == p["id"]
    (nxt,) = answer["proposals"]
    assert nxt["chain"] == 0 and nxt["iteration"] == p["iteration"] + 1


def test_a_finished_session_answers_done(api: TestClient, sessions: Any) -> None:
    """'When every chain has reached max_iterations, ask answers "done": true with no
    proposals.'"""
    sid = sessions(chains=2, max_iterations=3, warmup=1)["id"]
    proposals = ask(api, sid, max=2)
    while proposals:
        answer = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 2})
        proposals = answer["proposals"]
    answer = post(api, sid, "ask", {"max": 2})
    assert answer["done"] is True and answer["proposals"] == []
    summary = api.get(f"/v1/sessions/{sid}").json()
    assert [c["iterations"] for c in summary["chain_summaries"]] == [3, 3]


# --------------------------------------------------------------------------- update


def test_an_update_changes_the_fields_given_and_a_done_session_goes_on(
    api: TestClient, sessions: Any
) -> None:
    """'The fields given change; those left out stay as they are.' 'A session that was
    done ... goes on: ask hands out proposals again, each chain from where it stopped.'"""
    sid = sessions(max_iterations=3, warmup=1, stop={"rhat": 1.1, "ess": 10, "check_every": 100})[
        "id"
    ]
    proposals = ask(api, sid, max=2)
    while proposals:
        proposals = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 2})[
            "proposals"
        ]
    response = api.patch(f"/v1/sessions/{sid}", json={"max_iterations": 5})
    assert response.status_code == 200, response.text
    summary = response.json()
    assert (summary["max_iterations"], summary["status"]) == (5, "sampling")
    assert summary["stop"] == {"rhat": 1.1, "ess": 10.0, "check_every": 100}  # left out
    nxt = ask(api, sid, max=2)
    assert sorted(p["iteration"] for p in nxt) == [4, 4]


def test_max_iterations_may_only_grow(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'`max_iterations` may only grow: at least the current one and every chain's
    iterations (else 422 naming it); `null` makes the session open-ended.'"""
    sid = sessions(max_iterations=10)["id"]
    shorter = api.patch(f"/v1/sessions/{sid}", json={"max_iterations": 9})
    assert assert_problem(shorter, 422)["errors"][0]["field"] == "max_iterations"
    endless = api.patch(f"/v1/sessions/{sid}", json={"max_iterations": None})
    assert endless.status_code == 200 and endless.json()["max_iterations"] is None


# --------------------------------------------------------------------------- leases


def test_a_renewed_lease_runs_out_later(api: TestClient, sessions: Any) -> None:
    """'Renewing (`lease_seconds` > 0 ...) makes each named proposal's lease run out
    that many seconds from now, whether or not it had run out.'"""
    sid = sessions(chains=2)["id"]
    first, ran_out = ask(api, sid, max=2, lease_seconds=0.05)
    renewed = post(api, sid, "leases", {"ids": [first["id"]], "lease_seconds": 600})
    (lease,) = renewed["leases"]
    assert (lease["id"], lease["chain"]) == (first["id"], first["chain"])
    assert lease["lease_expires_at"] > first["lease_expires_at"]
    assert renewed["done"] is False and renewed["status"] == "warmup"
    time.sleep(0.1)  # both first leases have run out; the renewed one runs
    post(api, sid, "leases", {"ids": [ran_out["id"]], "lease_seconds": 600})
    assert ask(api, sid, max=2) == []
    # The proposals are the same: telling them is applied as usual.
    told = tell(api, sid, value(first), value(ran_out))
    assert [r["outcome"] for r in told["results"]] == ["initialized", "initialized"]


def test_a_handed_back_proposal_is_handed_out_again_at_once(api: TestClient, sessions: Any) -> None:
    """'`lease_seconds: 0` hands the proposals back: their leases end now
    (`lease_expires_at` null) and the next ask hands them out again, same ids and points,
    and wakes any long poll waiting for one.'"""
    sid = sessions(chains=2)["id"]
    first = started(api, sid)
    back = post(api, sid, "leases", {"ids": [first[1]["id"]], "lease_seconds": 0})
    assert back["leases"] == [{"id": first[1]["id"], "chain": 1, "lease_expires_at": None}]
    (again,) = ask(api, sid, max=2, wait_seconds=1)
    assert (again["id"], again["x"]) == (first[1]["id"], first[1]["x"])


def test_a_lease_can_only_be_set_on_an_outstanding_proposal(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'An id that was told already, that its chain never issued or a reset made
    obsolete, or of a chain the session does not have: 409, with one entry per refused
    id in `errors` saying which; nothing changes. An id not of the form the service gives
    out: 422 naming `ids.N`.'"""
    sid = sessions(chains=2)["id"]
    (p, q) = started(api, sid)
    tell(api, sid, value(p))
    before = state(api, sid)
    ids = [p["id"], q["id"], "c1.i9", "c7.i1"]
    problem = assert_problem(
        api.post(f"/v1/sessions/{sid}/leases", json={"ids": ids, "lease_seconds": 0}), 409
    )
    assert problem["ids"] == [p["id"], "c1.i9", "c7.i1"]
    why = [e["message"] for e in problem["errors"]]
    assert "told already" in why[0] and "never issued" in why[1] and "no such chain" in why[2]
    assert state(api, sid) == before and ask(api, sid, max=2) != [q]  # q is still leased
    invalid = api.post(f"/v1/sessions/{sid}/leases", json={"ids": ["zzz"], "lease_seconds": 1})
    assert assert_problem(invalid, 422)["errors"][0]["field"] == "ids.0"


def test_a_done_session_leases_nothing(api: TestClient, sessions: Any) -> None:
    """'In a session that is done, nothing is leased: `lease_expires_at` is null and
    `done` is true.'"""
    # Stopped by its rule at the first check: each chain keeps the proposal it waited for.
    sid = sessions(stop={"rhat": 100.0, "ess": 1.0, "check_every": 100})["id"]
    proposals = ask(api, sid, max=2)
    while proposals:
        proposals = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 2})[
            "proposals"
        ]
    summary = api.get(f"/v1/sessions/{sid}").json()
    assert summary["stopped_by"] == "rule"
    pending = f"c0.i{summary['chain_summaries'][0]['iterations'] + 1}"
    answer = post(api, sid, "leases", {"ids": [pending], "lease_seconds": 30})
    assert answer["leases"] == [{"id": pending, "chain": 0, "lease_expires_at": None}]
    assert answer["done"] is True and answer["status"] == "done"
    assert ask(api, sid, max=2) == []


# ------------------------------------------------------------------ draws, diagnostics


@pytest.fixture
def sampled(api: TestClient, sessions: Any) -> str:
    sid: str = sessions(chains=2, warmup=3, max_iterations=12, param_names=["=a", "b"])["id"]
    proposals = ask(api, sid, max=2)
    while proposals:
        proposals = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 2})[
            "proposals"
        ]
    return sid


def test_draws_as_csv_have_the_documented_header_and_escape_names(
    api: TestClient, sampled: str
) -> None:
    """'format=csv gives one row per draw with a header (chain,iteration,warmup,
    log_density,<names>).' 'Parameter names are escaped in CSV.'"""
    response = api.get(f"/v1/sessions/{sampled}/draws", params={"format": "csv"})
    assert response.headers["content-type"].startswith("text/csv")
    lines = response.text.splitlines()
    assert lines[0] == "chain,iteration,warmup,log_density,'=a,b"
    assert len(lines) == 1 + 2 * 9  # two chains, iterations 4..12 after warm-up


def test_draws_as_npy_load_with_numpy(api: TestClient, sampled: str) -> None:
    """'format=npy gives a float64 array of shape (chains, draws, dim) that numpy.load
    reads.'"""
    response = api.get(f"/v1/sessions/{sampled}/draws", params={"format": "npy"})
    array = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert array.dtype == np.float64 and array.shape == (2, 9, 2)
    as_json = api.get(f"/v1/sessions/{sampled}/draws").json()
    assert array.tolist() == [c["draws"] for c in as_json["chains"]]


def test_draws_say_whether_each_transition_accepted(api: TestClient, sampled: str) -> None:
    """'`accepted` says, per draw, whether its transition accepted its proposal'."""
    page = api.get(f"/v1/sessions/{sampled}/draws", params={"include_warmup": "true"}).json()
    for chain in page["chains"]:
        accepted = chain["accepted"]
        assert len(accepted) == len(chain["draws"]) and all(isinstance(a, bool) for a in accepted)
        draws = chain["draws"]
        for k in range(1, len(draws)):  # a rejected transition repeats the draw before
            if not accepted[k]:
                assert draws[k] == draws[k - 1]


def test_next_is_relative_and_pages_cover_every_draw(api: TestClient, sampled: str) -> None:
    """'next names the rest as a relative reference, resolved against the request's URL.'
    'The page size is documented and a parameter.'"""
    url = f"/v1/sessions/{sampled}/draws?page_size=4"
    rows = []
    while url:
        page = api.get(url).json()
        rows += [d for c in page["chains"] for d in c["draws"]]
        url = urljoin(url, page["next"]) if page["next"] else ""
        assert page["next"] is None or not page["next"].startswith("/")
    assert len(rows) == 2 * 9


def test_diagnostics_have_the_documented_fields(api: TestClient, sampled: str) -> None:
    """'per parameter: mean, sd, MCSE, bulk and tail ESS, split R-hat; per chain:
    acceptance rate.'"""
    body = api.get(f"/v1/sessions/{sampled}/diagnostics").json()
    for p in body["parameters"]:
        assert {"name", "mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "r_hat"} <= set(p)
    for c in body["chains"]:
        assert {"chain", "iterations", "acceptance_rate"} <= set(c)
        assert c["acceptance_rate"] is None or 0 <= c["acceptance_rate"] <= 1


def test_trace_thins_every_chain_by_one_power_of_two_stride(api: TestClient, sessions: Any) -> None:
    """'Each chain's selected draws are thinned by stride, the same for every chain: the
    smallest power of two that leaves at most points draws in the longest chain. A chain
    gives its draws 0, stride, 2 stride, ... of them; iterations names them.'"""
    sid = sessions(chains=2, warmup=5, max_iterations=40)["id"]
    proposals = ask(api, sid, max=2)
    while proposals:
        answer = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 2})
        proposals = answer["proposals"]
    full = api.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}).json()
    trace = api.get(
        f"/v1/sessions/{sid}/trace", params={"points": 12, "include_warmup": "true"}
    ).json()
    assert trace["stride"] == 4 and trace["params"] == [0, 1] and trace["warmup"] == 5
    for mine, every in zip(trace["chains"], full["chains"], strict=True):
        assert mine["length"] == 40
        assert mine["iterations"] == every["iterations"][::4] == list(range(1, 41, 4))
        assert mine["draws"] == every["draws"][::4]
        assert mine["log_density"] == every["log_density"][::4]
    post_warmup = api.get(f"/v1/sessions/{sid}/trace", params={"points": 35}).json()
    assert post_warmup["stride"] == 1
    assert post_warmup["chains"][0]["iterations"] == list(range(6, 41))


def test_trace_picks_parameters_and_gives_running_diagnostics(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'param (repeated) picks parameters by index; draws has one row per kept draw with
    the picked parameters in that order.' 'running gives split R-hat and bulk ESS of each
    picked parameter at up to checkpoints post-warm-up lengths.'"""
    sid = sessions(dim=3, chains=3, warmup=2, max_iterations=30, param_names=["a", "b", "c"])["id"]
    proposals = ask(api, sid, max=3)
    while proposals:
        answer = post(api, sid, "step", {"results": [value(p) for p in proposals], "max": 3})
        proposals = answer["proposals"]
    full = api.get(f"/v1/sessions/{sid}/draws").json()
    trace = api.get(
        f"/v1/sessions/{sid}/trace", params=[("param", 2), ("param", 0), ("checkpoints", 4)]
    ).json()
    assert trace["param_names"] == ["c", "a"] and trace["params"] == [2, 0]
    assert trace["chains"][1]["draws"] == [[d[2], d[0]] for d in full["chains"][1]["draws"]]
    running = trace["running"]
    assert 1 <= len(running["iterations"]) <= 4 and running["iterations"][-1] == 30
    assert running["iterations"] == sorted(running["iterations"])
    for rows in (running["r_hat"], running["ess_bulk"]):
        assert len(rows) == len(running["iterations"]) and all(len(r) == 2 for r in rows)
    assert all(v is None or v > 0 for r in running["ess_bulk"] for v in r)
    response = api.get(f"/v1/sessions/{sid}/trace", params={"param": 3})
    assert_problem(response, 422)
    response = api.get(f"/v1/sessions/{sid}/trace", params={"points": 100_000})
    assert_problem(response, 422)
    wide = sessions(chains=11)["id"]  # 11 x 10 000 points: over the 100 000 of a page
    response = api.get(f"/v1/sessions/{wide}/trace", params={"points": 10_000})
    assert_problem(response, 422)
    assert response.json()["errors"][0]["field"] == "points"


def test_trace_has_an_etag_that_changes_with_the_draws(api: TestClient, sessions: Any) -> None:
    """'The answer carries an ETag that changes whenever the draws do; a request with
    If-None-Match naming it gets 304 with no body.'"""
    sid = sessions(warmup=0)["id"]
    proposals = started(api, sid)
    url = f"/v1/sessions/{sid}/trace"
    first = api.get(url)
    tag = first.headers["etag"]
    again = api.get(url, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    post(api, sid, "tell", {"results": [value(p) for p in proposals]})
    changed = api.get(url, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert [len(c["iterations"]) for c in changed.json()["chains"]] == [1, 1]


# ------------------------------------------------------------------------------ errors


def test_malformed_json_is_a_400(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """'400: malformed JSON.'"""
    sid = sessions()["id"]
    for verb in ("ask", "tell", "step"):
        assert_problem(api.post(f"/v1/sessions/{sid}/{verb}", content=b"{"), 400)
    assert_problem(api.post("/v1/sessions", content=b"{"), 400)


def test_an_unknown_session_is_a_404(api: TestClient, assert_problem: ProblemCheck) -> None:
    """'404: no such session.'"""
    for verb, body in (("ask", {}), ("tell", {"results": []}), ("step", {})):
        assert_problem(api.post(f"/v1/sessions/nope/{verb}", json=body), 404)
    assert_problem(api.get("/v1/sessions/nope"), 404)
    assert_problem(api.get("/v1/sessions/nope/draws"), 404)


def test_invalid_input_is_a_422_naming_the_field(
    api: TestClient, assert_problem: ProblemCheck
) -> None:
    """'422: well-formed but invalid: NaN, wrong dimension, unknown algorithm or option.'
    'Every error body has one shape (problem+json with errors, each naming its field or
    id).'"""
    for body, field in [
        ({"algorithm": "nope", "dim": 2}, "algorithm"),
        ({"dim": 2, "initial": [[0.0]]}, "initial"),
        ({"algorithm": "rwm", "dim": 2, "options": {"nope": 1}}, "options"),
    ]:
        problem = assert_problem(api.post("/v1/sessions", json=body), 422)
        assert any(field in e["field"] for e in problem["errors"]), problem


def test_same_seed_and_values_give_the_same_draws(api: TestClient, sessions: Any) -> None:
    """'Same seed, same options and the same told values per proposal give the same
    draws, bit for bit.'"""
    runs = []
    for _ in range(2):
        sid = sessions(algorithm="am", chains=2, seed=42, max_iterations=20, warmup=5)["id"]
        proposals = ask(api, sid, max=2)
        while proposals:
            proposals = post(
                api, sid, "step", {"results": [value(p) for p in proposals[::-1]], "max": 2}
            )["proposals"]
        runs.append(api.get(f"/v1/sessions/{sid}/draws", params={"include_warmup": "true"}))
    assert runs[0].json()["chains"] == runs[1].json()["chains"]
    assert all(math.isfinite(v) for c in runs[0].json()["chains"] for v in c["log_density"])


def test_a_405_names_the_allowed_methods(api: TestClient, assert_problem: ProblemCheck) -> None:
    """Every error is problem+json; a 405 also says what is allowed (RFC 9110)."""
    response = api.put("/v1/sessions")
    assert_problem(response, 405)
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_is_json_whatever_its_content_type(
    api: TestClient, sessions: Any, content_type: str | None
) -> None:
    """One rule for every endpoint: a body is read as JSON whatever its Content-Type."""
    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps({"algorithm": "rwm", "dim": 2}).encode()
    created = api.post("/v1/sessions", content=body, headers=headers)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    asked = api.post(f"/v1/sessions/{sid}/ask", content=b'{"max": 1}', headers=headers)
    assert asked.status_code == 200 and len(asked.json()["proposals"]) == 1
    api.delete(f"/v1/sessions/{sid}")


def test_liveness_never_asks_the_store_and_readiness_does(api: TestClient) -> None:
    live = api.get("/v1/health/live")
    assert live.status_code == 200 and live.json()["store_ready"] is None
    ready = api.get("/v1/health/ready")
    assert ready.status_code == 200 and ready.json()["store_ready"] is True


def test_a_create_with_an_idempotency_key_is_retry_safe(api: TestClient) -> None:
    """ "A create with an `Idempotency-Key` header ... that the same key sent before, while
    the session it made lives, makes nothing, takes no quota and answers that session
    (201, the same `id` and `seed`)." """
    body = {"algorithm": "rwm", "dim": 2}
    headers = {"Idempotency-Key": f"conformance-{time.time_ns()}"}
    first = api.post("/v1/sessions", json=body, headers=headers)
    again = api.post("/v1/sessions", json=body, headers=headers)
    try:
        assert first.status_code == again.status_code == 201
        assert (first.json()["id"], first.json()["seed"]) == (
            again.json()["id"],
            again.json()["seed"],
        )
    finally:
        api.delete(f"/v1/sessions/{first.json()['id']}")


def test_a_retried_delete_answers_204(api: TestClient, assert_problem: ProblemCheck) -> None:
    """ "`DELETE /v1/sessions/{id}` | delete it and its draws (204; 204 again for a
    retry)" """
    sid = api.post("/v1/sessions", json={"dim": 2}).json()["id"]
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert_problem(api.get(f"/v1/sessions/{sid}"), 404)


def test_every_problem_has_errors_and_a_listed_type(
    api: TestClient, assert_problem: ProblemCheck
) -> None:
    """'... and `errors`, one entry per offending field (`field`) or proposal id (`id`),
    empty when the request as a whole is refused.' '`type` is
    `https://kameleon.dev/problems/` followed by a name that is stable'; a query
    parameter is named by its name."""
    listed = {
        "malformed-request", "unauthorized", "forbidden", "not-found", "method-not-allowed",
        "conflict", "payload-too-large", "invalid", "sampler-failed", "quota-exceeded",
        "store-unavailable",
        "service-busy",
    }  # fmt: skip
    answers = [
        (api.get("/v1/sessions/nope"), 404, []),
        (api.post("/v1/sessions", content=b"{"), 400, []),
        (api.put("/v1/sessions"), 405, []),
        (api.post("/v1/sessions", json={"dim": 0}), 422, ["dim"]),
        (api.get("/v1/sessions", params={"limit": 0}), 422, ["limit"]),
    ]
    for response, status, fields in answers:
        problem = assert_problem(response, status)
        assert problem["type"].startswith("https://kameleon.dev/problems/")
        assert problem["type"].rsplit("/", 1)[1] in listed, problem
        assert [e["field"] for e in problem["errors"]] == fields, problem


def test_a_quota_refusal_says_when_to_retry(
    start_client: Any, store_kind: str, assert_problem: ProblemCheck
) -> None:
    """'`quota-exceeded` | 429 | after deleting sessions, or after `Retry-After` (30 s)'"""
    from kameleon.service.config import Settings

    client = start_client(store_kind, Settings(max_sessions_per_key=1))
    assert client.post("/v1/sessions", json={"dim": 1}).status_code == 201
    refused = client.post("/v1/sessions", json={"dim": 1})
    problem = assert_problem(refused, 429)
    assert refused.headers["retry-after"] == "30"
    assert problem["sessions"] == 1 and problem["limit"] == 1 and problem["errors"] == []


# ---------------------------------------------------------- gradients, several evaluations


def _with_gradient(p: Json) -> Json:
    """The told result of a standard normal at ``p``, with its gradient."""
    return {**value(p), "gradient": [-v for v in p["x"]]}


def test_gradient_has_dim_finite_numbers_or_nothing_is_applied(
    api: TestClient, sessions: Any, assert_problem: ProblemCheck
) -> None:
    """`gradient` has `dim` numbers, finite wherever the log density is finite;
    otherwise the request is refused with 422, `field` naming `results.N.gradient` (or
    `results.N.gradient.K`, the offending coordinate), and nothing is applied."""
    sid = sessions(algorithm="mala", chains=1)["id"]
    (init,) = ask(api, sid)
    before = state(api, sid)
    for bad, field in (([1.0], "results.0.gradient"), ([0.0, None], "results.0.gradient.1")):
        response = api.post(
            f"/v1/sessions/{sid}/tell", json={"results": [{**value(init), "gradient": bad}]}
        )
        assert assert_problem(response, 422)["field"] == field
    assert state(api, sid) == before


def test_an_evaluation_within_a_transition_has_its_step_and_id(
    api: TestClient, sessions: Any
) -> None:
    """Every proposal carries its `step` in its transition (from 0) ... Its id is
    `c<chain>.i<iteration>.s<step>` when `step > 0`. Its tell answers the outcome
    `step`."""
    sid = sessions(algorithm="mala", chains=1)["id"]
    (init,) = ask(api, sid)
    assert init["step"] == 0
    answer = post(api, sid, "step", {"results": [_with_gradient(init)]})
    (check,) = answer["proposals"]
    assert (check["kind"], check["id"], check["step"]) == ("gradient_check", "c0.i1", 0)
    answer = post(api, sid, "step", {"results": [_with_gradient(check)]})
    assert answer["results"][0]["outcome"] == "step"
    (following,) = answer["proposals"]
    assert (following["id"], following["iteration"], following["step"]) == ("c0.i1.s1", 1, 1)


def test_pseudo_marginal_is_refused_with_a_gradient_sampler(
    api: TestClient, assert_problem: ProblemCheck
) -> None:
    """`pseudo_marginal: true` with such an algorithm is refused at creation (422, field
    `pseudo_marginal`)."""
    body = {"algorithm": "mala", "dim": 2, "pseudo_marginal": True}
    problem = assert_problem(api.post("/v1/sessions", json=body), 422)
    assert problem["field"] == "pseudo_marginal"


def test_a_result_told_in_parts_is_worth_the_tempered_sum(api: TestClient, sessions: Any) -> None:
    """The told value is then `prior_power * log_prior + log_likelihood` ... `log_density`
    may be left out; if it is given too it must equal that value (to a relative 1e-9),
    or the result is refused (422 naming `results.N.log_density`)."""
    sid = sessions(chains=1, prior_power=0.5)["id"]
    (init,) = ask(api, sid)
    wrong = {"id": init["id"], "log_prior": -2.0, "log_likelihood": -1.0, "log_density": -3.0}
    response = api.post(f"/v1/sessions/{sid}/tell", json={"results": [wrong]})
    assert response.status_code == 422
    assert response.json()["field"] == "results.0.log_density"
    right = {"id": init["id"], "log_prior": -2.0, "log_likelihood": -1.0}
    assert tell(api, sid, right)["results"][0]["outcome"] == "initialized"
    whole = {"id": init["id"], "log_density": 0.5 * -2.0 + -1.0}
    assert tell(api, sid, whole)["results"][0]["outcome"] == "duplicate"


def test_both_parts_or_neither(api: TestClient, sessions: Any) -> None:
    """Both parts, or neither: one without the other is refused (422 naming the missing
    one)."""
    sid = sessions(chains=1)["id"]
    (init,) = ask(api, sid)
    for part, missing in (("log_prior", "log_likelihood"), ("log_likelihood", "log_prior")):
        response = api.post(
            f"/v1/sessions/{sid}/tell", json={"results": [{"id": init["id"], part: -1.0}]}
        )
        assert response.status_code == 422
        assert response.json()["field"] == f"results.0.{missing}"


def test_consensus_needs_two_sessions_of_one_shape(api: TestClient, sessions: Any) -> None:
    """422 naming `sessions` for fewer than 2 sessions ...; `sessions.K` for a session
    repeated, or one whose `dim` or `param_names` differ from the first's; 404 for a
    session that does not exist."""
    a, b = sessions()["id"], sessions(dim=3)["id"]

    def refused(ids: list[str]) -> list[str]:
        response = api.post("/v1/consensus", json={"sessions": ids})
        assert response.status_code == 422, response.text
        return [e["field"] for e in response.json()["errors"]]

    assert refused([a]) == ["sessions"]
    assert refused([a, a]) == ["sessions.1"]
    assert refused([a, b]) == ["sessions.1"]
    assert api.post("/v1/consensus", json={"sessions": [a, "f" * 24]}).status_code == 404
