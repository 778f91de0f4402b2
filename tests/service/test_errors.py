"""Bad input, on the memory and the Redis store.

Every bad request gets its documented 4xx status as RFC 9457 problem details
(``application/problem+json`` with ``type``, ``title``, ``status`` and ``detail``) and
changes nothing: the session's summary, its draws, the list of sessions and the leases
are as they were. No input, however odd, gets a 5xx.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kameleon.service.config import Settings

Json = dict[str, Any]
ClientFactory = Callable[..., TestClient]

ProblemCheck = Callable[[httpx.Response, int], Json]
NAN, INF = math.nan, math.inf
DEFAULTS = Settings()

SESSION = {
    "algorithm": "rwm",
    "dim": 2,
    "chains": 2,
    "seed": 5,
    "warmup": 2,
    "max_iterations": None,
}
"""The session every case runs against. Its fixture tells the initial points and three
transitions per chain, so the next proposals, ``c0.i4`` and ``c1.i4``, are free."""

NEXT = [{"id": "c0.i4", "log_density": -1.0}, {"id": "c1.i4", "log_density": -1.0}]


def send(client: TestClient, method: str, path: str, body: Any = None) -> httpx.Response:
    """``body``: bytes as they are, anything else as JSON (NaN and infinities written as
    JavaScript's ``NaN``, ``Infinity``, ``-Infinity``), ``None`` for no body."""
    if body is None:
        response: httpx.Response = client.request(method, path)
        return response
    content = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    response = client.request(
        method, path, content=content, headers={"content-type": "application/json"}
    )
    return response


def new_session(client: TestClient) -> str:
    """A :data:`SESSION` with three transitions per chain and no live lease."""
    response = client.post("/v1/sessions", json=SESSION)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()["proposals"]
    for want in (2, 2, 2, 0):  # the initial points, then three transitions
        results = [{"id": p["id"], "log_density": -1.0 - p["iteration"]} for p in proposals]
        response = client.post(f"/v1/sessions/{sid}/step", json={"results": results, "max": want})
        assert response.status_code == 200, response.text
        proposals = response.json()["proposals"]
    return sid


@pytest.fixture(scope="module")
def sid(module_client: TestClient) -> str:
    """A session shared by the module's tests: each must leave it as it found it."""
    return new_session(module_client)


@pytest.fixture(scope="module")
def last_seen(module_client: TestClient) -> dict[bool, list[Any]]:
    """The shared session's :func:`state` as the previous test left it, if that test
    passed (by ``listing``): it saves asking again for what cannot have changed."""
    return {}


def state(client: TestClient, sid: str, *, listing: bool = False) -> list[Any]:
    """What a request could change: the summary, every draw, and if ``listing``, the
    sessions listed."""
    paths = [f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/draws?include_warmup=true"]
    if listing:
        paths.append("/v1/sessions?limit=1000")
    responses = [client.get(path) for path in paths]
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    return [r.json() for r in responses]


def assert_free(client: TestClient, sid: str) -> None:
    """Both chains' next proposals are still untold and unleased (checked with a lease
    that runs out at once, so they stay free for the next test)."""
    response = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2, "lease_seconds": 1e-3})
    assert sorted(p["id"] for p in response.json()["proposals"]) == ["c0.i4", "c1.i4"]


def case(
    name: str, method: str, path: str, body: Any, status: int, named: str | None = None
) -> Any:
    """A bad request. ``{sid}`` in ``path`` is the test session's id; ``named``, when
    given, must appear in the problem's ``detail``."""
    return pytest.param(method, path, body, status, named, id=name)


SESSIONS, S = "/v1/sessions", "/v1/sessions/{sid}"
ASK, TELL, STEP = f"{S}/ask", f"{S}/tell", f"{S}/step"
RESET, DRAWS, LEASES = f"{S}/chains/0/reset", f"{S}/draws", f"{S}/leases"
UNKNOWN = "/v1/sessions/0123456789abcdef01234567"


def create(**fields: Any) -> Json:
    return {**SESSION, **fields}


def results(*entries: Json) -> Json:
    return {"results": list(entries)}


def told(log_density: Any, pid: Any = "c0.i4") -> Json:
    return results({"id": pid, "log_density": log_density})


CASES = [
    # ------------------------------------------------------------ malformed and shapeless
    case("create-malformed", "POST", SESSIONS, b'{"algorithm": "rwm",', 400),
    case("create-not-utf8", "POST", SESSIONS, b'{"algorithm": "\xff"}', 400),
    case("ask-malformed", "POST", ASK, b'{"max": ', 400),
    case("tell-malformed", "POST", TELL, b'{"results": [{"id": "c0.i4", ', 400),
    case("step-malformed", "POST", STEP, b"{results: []}", 400),
    case("reset-malformed", "POST", RESET, b'{"initial": [0, 0}', 400),
    case("create-array", "POST", SESSIONS, [SESSION], 422),
    case("create-null", "POST", SESSIONS, b"null", 422),
    case("create-empty", "POST", SESSIONS, {}, 422, "dim"),
    case("ask-array", "POST", ASK, [1], 422),
    case("tell-array", "POST", TELL, NEXT, 422),
    case("tell-no-results", "POST", TELL, {}, 422, "results"),
    case("tell-results-object", "POST", TELL, {"results": NEXT[0]}, 422),
    case("tell-result-number", "POST", TELL, {"results": [1]}, 422),
    case("step-array", "POST", STEP, [], 422),
    # ------------------------------------------------------------------------- create
    case(
        "unknown-algorithm", "POST", SESSIONS, create(algorithm="no-such-sampler"), 422, "algorithm"
    ),
    case("dim-string", "POST", SESSIONS, create(dim="2"), 422, "dim"),
    case("dim-float", "POST", SESSIONS, create(dim=2.0), 422, "dim"),
    case("dim-zero", "POST", SESSIONS, create(dim=0), 422, "dim"),
    case("dim-over-limit", "POST", SESSIONS, create(dim=DEFAULTS.max_dim + 1), 422, "dim"),
    case("dim-huge", "POST", SESSIONS, create(dim=10**30), 422, "dim"),
    case("chains-string", "POST", SESSIONS, create(chains="2"), 422, "chains"),
    case("chains-negative", "POST", SESSIONS, create(chains=-1), 422, "chains"),
    case("chains-over", "POST", SESSIONS, create(chains=DEFAULTS.max_chains + 1), 422, "chains"),
    case("seed-negative", "POST", SESSIONS, create(seed=-1), 422, "seed"),
    case("seed-over-63-bits", "POST", SESSIONS, create(seed=2**63), 422, "seed"),
    case("warmup-string", "POST", SESSIONS, create(warmup="10"), 422, "warmup"),
    case("warmup-negative", "POST", SESSIONS, create(warmup=-1), 422, "warmup"),
    case("warmup-huge", "POST", SESSIONS, create(warmup=10**30), 422, "warmup"),
    case("max-iterations-zero", "POST", SESSIONS, create(max_iterations=0), 422, "max_iterations"),
    case(
        "max-iterations-over-limit",
        "POST",
        SESSIONS,
        create(max_iterations=DEFAULTS.max_iterations_limit + 1),
        422,
        "max_iterations",
    ),
    case("initial-row-too-long", "POST", SESSIONS, create(initial=[[0, 0, 0]]), 422, "initial"),
    case("initial-rows-3-for-2", "POST", SESSIONS, create(initial=[[0, 0]] * 3), 422, "initial"),
    case("initial-flat-wrong-length", "POST", SESSIONS, create(initial=[0, 0, 0]), 422, "initial"),
    case("initial-strings", "POST", SESSIONS, create(initial=[["0", "0"]]), 422, "initial"),
    case("initial-nan", "POST", SESSIONS, create(initial=[[NAN, 0]]), 422, "initial"),
    case("initial-nan-string", "POST", SESSIONS, create(initial=[["nan", 0]]), 422, "initial"),
    case("param-names-short", "POST", SESSIONS, create(param_names=["a"]), 422, "param_names"),
    case("param-names-same", "POST", SESSIONS, create(param_names=["a", "a"]), 422, "param_names"),
    case("option-unknown", "POST", SESSIONS, create(options={"bogus": 1}), 422, "bogus"),
    case("option-type", "POST", SESSIONS, create(options={"scale": "big"}), 422, "scale"),
    case(
        "option-out-of-range",
        "POST",
        SESSIONS,
        create(options={"target_acceptance": 1.5}),
        422,
        "target_acceptance",
    ),
    case(
        "option-not-a-choice",
        "POST",
        SESSIONS,
        create(options={"adaptation": "sometimes"}),
        422,
        "adaptation",
    ),
    case(
        "option-of-another-algorithm",
        "POST",
        SESSIONS,
        create(options={"subsample_size": 10}),
        422,
        "subsample_size",
    ),
    case(
        "option-int-huge",
        "POST",
        SESSIONS,
        create(algorithm="kameleon", options={"subsample_size": 10**30}),
        422,
        "subsample_size",
    ),
    case(
        "option-name-lone-surrogate",
        "POST",
        SESSIONS,
        b'{"algorithm": "rwm", "dim": 2, "options": {"\\ud800": 1}}',
        422,
    ),
    case("create-unknown-field", "POST", SESSIONS, create(algoritm="rwm"), 422, "algoritm"),
    # ---------------------------------------------------------------------------- ask
    case("max-zero", "POST", ASK, {"max": 0}, 422, "max"),
    case("max-string", "POST", ASK, {"max": "2"}, 422, "max"),
    case("max-float", "POST", ASK, {"max": 2.5}, 422, "max"),
    case("max-over-limit", "POST", ASK, {"max": DEFAULTS.max_ask + 1}, 422, "max"),
    case("lease-zero", "POST", ASK, {"lease_seconds": 0}, 422, "lease_seconds"),
    case("lease-string", "POST", ASK, {"lease_seconds": "60"}, 422, "lease_seconds"),
    case("lease-nan", "POST", ASK, {"lease_seconds": NAN}, 422, "lease_seconds"),
    case("lease-inf", "POST", ASK, {"lease_seconds": INF}, 422, "lease_seconds"),
    case(
        "lease-over-limit",
        "POST",
        ASK,
        {"lease_seconds": DEFAULTS.max_lease_seconds * 2},
        422,
        "lease_seconds",
    ),
    case("ask-unknown-field", "POST", ASK, {"maximum": 2}, 422, "maximum"),
    # --------------------------------------------------------------------------- tell
    case("log-density-nan", "POST", TELL, told(NAN), 422, "log_density"),
    case("log-density-plus-inf", "POST", TELL, told(INF), 422, "log_density"),
    case(
        "log-density-overflow",
        "POST",
        TELL,
        b'{"results": [{"id": "c0.i4", "log_density": 1e999}]}',
        422,
        "log_density",
    ),
    case("log-density-nan-string", "POST", TELL, told("nan"), 422, "log_density"),
    case("log-density-plus-inf-string", "POST", TELL, told("+inf"), 422, "log_density"),
    case("log-density-number-string", "POST", TELL, told("1.0"), 422, "log_density"),
    case("log-density-bool", "POST", TELL, told(True), 422, "log_density"),
    case("log-density-missing", "POST", TELL, results({"id": "c0.i4"}), 422, "log_density"),
    case("id-missing", "POST", TELL, results({"log_density": -1.0}), 422, "id"),
    case("id-number", "POST", TELL, told(-1.0, 4), 422, "id"),
    case("id-empty", "POST", TELL, told(-1.0, ""), 422, "id"),
    case("id-no-iteration", "POST", TELL, told(-1.0, "c0"), 422, "id"),
    case("id-word", "POST", TELL, told(-1.0, "chain0.iteration4"), 422, "id"),
    case("id-leading-zero", "POST", TELL, told(-1.0, "c00.i4"), 422, "id"),
    case("id-negative-chain", "POST", TELL, told(-1.0, "c-1.i4"), 422, "id"),
    case("id-epoch-zero", "POST", TELL, told(-1.0, "c0.e0.i0"), 422, "id"),
    case("id-epoch-past-init", "POST", TELL, told(-1.0, "c0.e1.i4"), 422, "id"),
    case("id-too-long", "POST", TELL, told(-1.0, "c0.i" + "4" * 100), 422, "id"),
    case(
        "result-unknown-field",
        "POST",
        TELL,
        results({"id": "c0.i4", "log_density": -1.0, "value": -1.0}),
        422,
        "value",
    ),
    case("tell-unknown-field", "POST", TELL, {"results": NEXT, "max": 1}, 422, "max"),
    case("tell-known-id-new-value", "POST", TELL, told(12345.0, "c0.i2"), 409),
    case("tell-known-init-new-value", "POST", TELL, told(12345.0, "c1.i0"), 409),
    case("tell-future-iteration", "POST", TELL, told(-1.0, "c0.i9"), 409),
    case("tell-huge-iteration", "POST", TELL, told(-1.0, "c0.i" + "9" * 18), 409),
    case("tell-unknown-chain", "POST", TELL, told(-1.0, "c2.i4"), 409),
    case("tell-huge-chain", "POST", TELL, told(-1.0, "c999999999.i1"), 409),
    case("tell-epoch-never-issued", "POST", TELL, told(-1.0, "c0.e3.i0"), 409),
    case(
        "tell-batch-one-nan", "POST", TELL, results(NEXT[0], {**NEXT[1], "log_density": NAN}), 422
    ),
    case("tell-batch-one-bad-id", "POST", TELL, results(NEXT[0], {**NEXT[1], "id": "x"}), 422),
    # --------------------------------------------------------------------------- step
    case("step-nan", "POST", STEP, told(NAN), 422, "log_density"),
    case("step-max-negative", "POST", STEP, {"results": NEXT, "max": -1}, 422, "max"),
    case("step-max-string", "POST", STEP, {"results": NEXT, "max": "1"}, 422, "max"),
    case("step-max-over-limit", "POST", STEP, {"results": NEXT, "max": DEFAULTS.max_ask + 1}, 422),
    case("step-lease-zero", "POST", STEP, {"results": NEXT, "lease_seconds": 0}, 422),
    case("step-lease-over-limit", "POST", STEP, {"results": NEXT, "lease_seconds": 1e12}, 422),
    case("step-unknown-field", "POST", STEP, {"result": NEXT}, 422, "result"),
    case("step-stale", "POST", STEP, told(12345.0, "c0.i3"), 409),
    case(
        "step-batch-one-bad", "POST", STEP, results(NEXT[0], {**NEXT[1], "log_density": "1"}), 422
    ),
    # -------------------------------------------------------------------------- reset
    case("reset-with-a-current-state", "POST", RESET, {"initial": [1.0, 1.0]}, 409),
    case("reset-too-long", "POST", RESET, {"initial": [1.0, 1.0, 1.0]}, 422, "initial"),
    case("reset-strings", "POST", RESET, {"initial": ["1", "1"]}, 422, "initial"),
    case("reset-nan", "POST", RESET, {"initial": [NAN, 1.0]}, 422, "initial"),
    case("reset-no-initial", "POST", RESET, {}, 422, "initial"),
    case("reset-unknown-field", "POST", RESET, {"initial": [1, 1], "chain": 0}, 422, "chain"),
    case("reset-negative-chain", "POST", f"{S}/chains/-1/reset", {"initial": [1, 1]}, 422),
    case("reset-no-such-chain", "POST", f"{S}/chains/2/reset", {"initial": [1, 1]}, 404),
    # -------------------------------------------------------------------------- draws
    case("draws-negative-start", "GET", f"{DRAWS}?start=-1", None, 422, "start"),
    case("draws-negative-stop", "GET", f"{DRAWS}?stop=-1", None, 422, "stop"),
    case("draws-stop-before-start", "GET", f"{DRAWS}?start=3&stop=1", None, 422, "stop"),
    case("draws-thin-zero", "GET", f"{DRAWS}?thin=0", None, 422, "thin"),
    case("draws-format-xml", "GET", f"{DRAWS}?format=xml", None, 422, "format"),
    case("draws-warmup-maybe", "GET", f"{DRAWS}?include_warmup=maybe", None, 422),
    case("draws-negative-chain", "GET", f"{DRAWS}?chain=-1", None, 422, "chain"),
    case("draws-no-such-chain", "GET", f"{DRAWS}?chain=2", None, 404),
    case("draws-huge-chain", "GET", f"{DRAWS}?chain={10**30}", None, 404),
    # ----------------------------------------------------------------------- listing
    case("list-limit-zero", "GET", f"{SESSIONS}?limit=0", None, 422, "limit"),
    case("list-limit-over", "GET", f"{SESSIONS}?limit=1001", None, 422, "limit"),
    case("list-limit-word", "GET", f"{SESSIONS}?limit=all", None, 422, "limit"),
    case("list-cursor-not-issued", "GET", f"{SESSIONS}?cursor=abc", None, 422, "cursor"),
    case("list-cursor-too-long", "GET", f"{SESSIONS}?cursor={'1' * 201}", None, 422, "cursor"),
    # ---------------------------------------------------------------- unknown sessions
    case("get-unknown-session", "GET", UNKNOWN, None, 404),
    case("delete-unknown-session", "DELETE", UNKNOWN, None, 404),
    case("ask-unknown-session", "POST", f"{UNKNOWN}/ask", {"max": 1}, 404),
    case("tell-unknown-session", "POST", f"{UNKNOWN}/tell", {"results": NEXT}, 404),
    case("step-unknown-session", "POST", f"{UNKNOWN}/step", {"results": NEXT}, 404),
    case("reset-unknown-session", "POST", f"{UNKNOWN}/chains/0/reset", {"initial": [0, 0]}, 404),
    case("draws-unknown-session", "GET", f"{UNKNOWN}/draws", None, 404),
    case("diagnostics-unknown-session", "GET", f"{UNKNOWN}/diagnostics", None, 404),
    case("odd-session-id", "GET", f"{SESSIONS}/%7Bx%7D:meta", None, 404),
    # -------------------------------------------------------------- update and leases
    case("update-malformed", "PATCH", S, b'{"max_iterations": ', 400),
    case("update-unknown-field", "PATCH", S, {"warmup": 3}, 422),
    case("update-shorter-than-made", "PATCH", S, {"max_iterations": 2}, 422, "max_iterations"),
    case("update-string", "PATCH", S, {"max_iterations": "10"}, 422),
    case("update-bad-rule", "PATCH", S, {"stop": {"rhat": 0.5}}, 422),
    case("update-over-the-limit", "PATCH", S, {"max_iterations": 10**12}, 422),
    case("update-unknown-session", "PATCH", UNKNOWN, {"max_iterations": 10}, 404),
    case("leases-malformed", "POST", LEASES, b'{"ids": [', 400),
    case("leases-none", "POST", LEASES, {"ids": [], "lease_seconds": 1}, 422),
    case("leases-negative", "POST", LEASES, {"ids": ["c0.i4"], "lease_seconds": -1}, 422),
    case("leases-too-long", "POST", LEASES, {"ids": ["c0.i4"], "lease_seconds": 1e9}, 422),
    case("leases-no-seconds", "POST", LEASES, {"ids": ["c0.i4"]}, 422),
    case("leases-not-an-id", "POST", LEASES, {"ids": ["zzz"], "lease_seconds": 1}, 422, "zzz"),
    case("leases-told", "POST", LEASES, {"ids": ["c0.i3"], "lease_seconds": 1}, 409, "told"),
    case(
        "leases-one-of-two-told",
        "POST",
        LEASES,
        {"ids": ["c1.i4", "c0.i2"], "lease_seconds": 0},
        409,
    ),
    # ------------------------------------------------------------- routes and methods
    case("unknown-route", "GET", "/v1/nothing", None, 404),
    case("unknown-version", "GET", "/v2/sessions", None, 404),
    case("unknown-session-route", "POST", f"{S}/evaluate", {}, 404),
    case("put-sessions", "PUT", SESSIONS, SESSION, 405),
    case("put-session", "PUT", S, {"warmup": 3}, 405),
    case("post-session", "POST", S, {}, 405),
    case("get-ask", "GET", ASK, None, 405),
    case("post-draws", "POST", DRAWS, {}, 405),
    case("delete-health", "DELETE", "/v1/health", None, 405),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "named"), CASES)
def test_bad_request_is_a_problem_and_changes_nothing(
    module_client: TestClient,
    sid: str,
    last_seen: dict[bool, list[Any]],
    assert_problem: ProblemCheck,
    method: str,
    path: str,
    body: Any,
    status: int,
    named: str | None,
) -> None:
    client = module_client
    listing = (method, path) == ("POST", SESSIONS)
    before = last_seen.pop(listing, None) or state(client, sid, listing=listing)
    last_seen.clear()  # until this test passes
    response = send(client, method, path.format(sid=sid), body)
    problem = assert_problem(response, status)
    if named is not None:
        assert named in problem["detail"], problem
    after = state(client, sid, listing=listing)
    assert after == before
    assert_free(client, sid)
    last_seen[listing] = after


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "", "99999999999999999999999", "0x10"])
def test_no_cursor_is_a_server_error(module_client: TestClient, cursor: str) -> None:
    response = module_client.get("/v1/sessions", params={"cursor": cursor})
    assert response.status_code < 500, response.text


def test_body_over_the_limit_is_413(
    make_client: ClientFactory, assert_problem: ProblemCheck
) -> None:
    limit = 1024
    client = make_client(Settings(max_body_bytes=limit))
    sid = new_session(client)
    before = state(client, sid)
    padded = results(*NEXT, *[NEXT[0]] * 40)
    assert len(json.dumps(padded)) > limit
    assert_problem(send(client, "POST", f"/v1/sessions/{sid}/tell", padded), 413)
    assert_problem(send(client, "POST", f"/v1/sessions/{sid}/step", padded), 413)
    big = {**SESSION, "param_names": [f"p{i:0500d}" for i in range(2)]}
    assert_problem(send(client, "POST", "/v1/sessions", big), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is streamed
        yield b'{"results": ['
        for _ in range(40):
            yield json.dumps(NEXT[0]).encode() + b","
        yield json.dumps(NEXT[1]).encode() + b"]}"

    response = client.post(
        f"/v1/sessions/{sid}/tell", content=chunks(), headers={"content-type": "application/json"}
    )
    assert_problem(response, 413)
    assert state(client, sid) == before
    assert_free(client, sid)
    # Under the limit, the same request is applied.
    response = send(client, "POST", f"/v1/sessions/{sid}/tell", results(*NEXT))
    assert response.status_code == 200, response.text


# --------------------------------------------------------------------------- fuzzing

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["-inf", "nan", "c0.i4", "c1.i0", "c0.e1.i0", "kameleon", "kmc-lite", "am"])
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
FUZZ_SETTINGS = Settings(max_dim=16, max_chains=4, max_ask=16, max_iterations_limit=1000)
"""Small limits, so that a random valid session stays cheap."""

TEMPLATES: dict[str, Json] = {
    "create": {
        "algorithm": "rwm",
        "dim": 2,
        "chains": 2,
        "initial": [[0.0, 0.0]],
        "seed": 1,
        "warmup": 10,
        "max_iterations": 100,
        "param_names": ["a", "b"],
        "pseudo_marginal": False,
        "options": {"target_acceptance": 0.3},
    },
    "ask": {"max": 2, "lease_seconds": 30.0},
    "tell": {"results": [dict(NEXT[0]), {**NEXT[1], "gradient": [0.0, 0.0]}]},
    "step": {"results": [dict(NEXT[0]), {**NEXT[1], "gradient": [0.0, 0.0]}], "max": 2},
}
_DROP = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a template a mutation can hit."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += _paths(inner, (*prefix, index))
    return out


def _mutate(template: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``template`` with the value at ``path`` replaced (or removed)."""
    if not path:
        return new
    copy = json.loads(json.dumps(template))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    if new is _DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return copy


def bodies(template: Json) -> st.SearchStrategy[Any]:
    """Random JSON, random bytes, and the template with one part replaced or removed."""
    mutated = st.builds(
        _mutate, st.just(template), st.sampled_from(_paths(template)), VALUES | st.just(_DROP)
    )
    extra_key = st.builds(lambda k, v: {**template, k: v}, st.text(max_size=8), VALUES)
    return st.one_of(mutated, mutated, extra_key, VALUES, st.binary(max_size=40))


@pytest.mark.parametrize("endpoint", list(TEMPLATES))
def test_no_input_is_a_server_error(
    make_client: ClientFactory, assert_problem: ProblemCheck, endpoint: str
) -> None:
    client = make_client(FUZZ_SETTINGS)
    sid = new_session(client)
    path = SESSIONS if endpoint == "create" else f"/v1/sessions/{sid}/{endpoint}"

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(body=bodies(TEMPLATES[endpoint]))
    def post(body: Any) -> None:
        response = send(client, "POST", path, body)
        assert response.status_code < 500, (body, response.text)
        if response.status_code >= 400:
            assert_problem(response, response.status_code)

    post()
