"""``kameleon.Client`` and ``kameleon.AsyncClient`` against a live service: every
endpoint, paging, and problem+json answers as typed exceptions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import subprocess
import sys

import httpx
import numpy as np
import pytest

import kameleon
from kameleon.models import Draws, Session
from tests.sdk.conftest import PAGE_SIZE, clean_env
from tests.servers import KAMELEON, free_port, serving


def _normal(x: list[float]) -> float:
    return -0.5 * float(np.dot(x, x))


def _run(client: kameleon.Client, sid: str, batch: int) -> None:
    """Drive a session to its end with ask and step."""
    answer = client.ask(sid, max=batch)
    while answer.proposals:
        results = [(p.id, _normal(p.x)) for p in answer.proposals]
        answer = client.step(sid, results, max=batch)
    assert answer.done and answer.status == "done"


def test_importing_kameleon_imports_neither_fastapi_nor_pydantic() -> None:
    code = (
        "import sys, kameleon\n"
        "kameleon.Client, kameleon.AsyncClient, kameleon.NotFound, kameleon.Result\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'pydantic', 'starlette', 'redis', 'uvicorn'))\n"
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_sessions_are_created_listed_read_and_deleted(server: str) -> None:
    with kameleon.Client(server) as client:
        health = client.health()
        assert health.ok and health.store == "memory" and health.store_ready
        created = [
            client.create_session(
                2, algorithm="rwm", chains=2, seed=k, warmup=10, max_iterations=20
            )
            for k in range(3)
        ]
        assert all(isinstance(s, Session) for s in created)
        got = client.get_session(created[1].id)
        assert (got.id, got.seed, got.chains, got.algorithm) == (created[1].id, 1, 2, "rwm")
        assert got.param_names == ["x0", "x1"] and got.status == "warmup"
        assert [c.chain for c in got.chain_summaries] == [0, 1]
        # One session per page: iter_sessions follows the cursors.
        first = client.list_sessions(limit=1)
        assert len(first.sessions) == 1 and first.next is not None
        listed = [s.id for s in client.iter_sessions(limit=1)]
        assert {s.id for s in created} <= set(listed)
        assert len(listed) == len(set(listed))
        client.delete_session(created[0].id)
        with pytest.raises(kameleon.NotFound):
            client.get_session(created[0].id)
        assert created[0].id not in {s.id for s in client.iter_sessions()}


def test_ask_tell_step_and_reset(server: str) -> None:
    with kameleon.Client(server) as client:
        session = client.create_session(
            2, chains=2, initial=[0.5, 0.5], seed=4, warmup=5, max_iterations=30
        )
        asked = client.ask(session.id, max=2, lease_seconds=30)
        assert sorted(p.chain for p in asked.proposals) == [0, 1]
        assert {p.kind for p in asked.proposals} == {"init"}
        assert all(p.x == [0.5, 0.5] for p in asked.proposals)
        first, second = asked.proposals
        # Outside the support: the given initial point is not replaced, the chain waits.
        told = client.tell(
            session.id, [(first.id, -math.inf), {"id": second.id, "log_density": -0.25}]
        )
        assert [(t.id, t.outcome) for t in told] == [
            (first.id, "outside_support"),
            (second.id, "initialized"),
        ]
        assert client.tell(session.id, [(second.id, -0.25)])[0].outcome == "duplicate"
        assert client.get_session(session.id).status == "needs_initial_point"
        chain = client.reset_chain(session.id, first.chain, [0.1, -0.1])
        assert chain.chain == first.chain and chain.status == "initial" and chain.resets == 1
        _run(client, session.id, batch=2)
        done = client.get_session(session.id)
        assert done.done and done.stopped_by == "max_iterations"
        assert [c.iterations for c in done.chain_summaries] == [30, 30]


def test_a_result_may_tell_the_prior_and_the_likelihood_apart(server: str) -> None:
    # The client passes log_prior and log_likelihood through (and no log_density unless
    # given): the service records their sum, and a retry of the same parts is a duplicate.
    with kameleon.Client(server) as client:
        session = client.create_session(2, chains=1, initial=[0.5, 0.5], seed=4, warmup=5)
        (p,) = client.ask(session.id, max=1).proposals
        parts = {"id": p.id, "log_prior": -1.5, "log_likelihood": -2.25}
        assert client.tell(session.id, [parts])[0].outcome == "initialized"
        assert client.tell(session.id, [{**parts, "log_density": -3.75}])[0].outcome == (
            "duplicate"
        )
        (q,) = client.ask(session.id, max=1).proposals
        told = client.tell(session.id, [{"id": q.id, "log_prior": None, "log_likelihood": 0.0}])
        assert told[0].outcome == "rejected"  # a log prior of -inf: outside the support
        draws = client.draws(session.id, include_warmup=True)
        assert draws.log_density is not None
        assert draws.log_density[0].tolist() == [-3.75]  # the first draw stayed put


def test_draws_follow_every_page_in_json_and_npy(server: str) -> None:
    chains, warmup, total = 4, 20, 320  # 300 post-warm-up draws per chain
    requests: list[str] = []

    def count(request: httpx.Request) -> None:
        if request.url.path.endswith("/draws"):
            requests.append(str(request.url))

    with kameleon.Client(server) as client:
        client._http.event_hooks["request"].append(count)
        session = client.create_session(
            3, chains=chains, seed=8, warmup=warmup, max_iterations=total
        )
        _run(client, session.id, batch=chains)
        as_json = client.draws(session.id)
        json_pages = len(requests)
        as_npy = client.draws(session.id, format="npy")
        one = client.draws(session.id, chain=2, start=10, stop=290, thin=3)
        with_warmup = client.draws(session.id, include_warmup=True, format="npy")
    per_page = PAGE_SIZE // chains
    assert json_pages == math.ceil((total - warmup) / per_page) > 1
    assert len(requests) > 2 * json_pages  # NPY paged too
    assert isinstance(as_json, Draws) and as_json.draws.shape == (chains, total - warmup, 3)
    assert as_json.chains == [0, 1, 2, 3] and as_json.param_names == ["x0", "x1", "x2"]
    assert as_npy.draws.tobytes() == as_json.draws.tobytes()
    assert as_npy.log_density is None
    assert as_json.log_density is not None and as_json.iterations is not None
    expected = [[_normal(list(x)) for x in chain] for chain in as_json.draws]
    np.testing.assert_array_equal(as_json.log_density, expected)  # the values told, exactly
    assert as_json.iterations[0, 0] == warmup + 1 and as_json.iterations[0, -1] == total
    assert one.chains == [2]
    np.testing.assert_array_equal(one.draws[0], as_json.draws[2, 10:290:3])
    assert with_warmup.draws.shape == (chains, total, 3)
    np.testing.assert_array_equal(with_warmup.draws[:, warmup:], as_json.draws)


def test_diagnostics_are_typed(server: str) -> None:
    with kameleon.Client(server) as client:
        session = client.create_session(2, chains=4, seed=2, warmup=100, max_iterations=300)
        _run(client, session.id, batch=4)
        diagnostics = client.diagnostics(session.id)
    assert diagnostics.draws == 200
    assert [p.name for p in diagnostics.parameters] == ["x0", "x1"]
    assert all(1.0 <= p.r_hat < 1.5 and p.ess_bulk > 0 for p in diagnostics.parameters)
    assert [c.chain for c in diagnostics.chains] == [0, 1, 2, 3]
    assert all(
        c.acceptance_rate is not None and 0 < c.acceptance_rate < 1 for c in diagnostics.chains
    )
    # 200 draws per chain are too few for an ESS of 100 per chain: the service says so.
    assert {"ess_bulk", "ess_tail"} & {w.code for w in diagnostics.warnings}
    assert diagnostics.max_r_hat == max(p.r_hat for p in diagnostics.parameters)


def test_problems_become_typed_exceptions(server: str) -> None:
    with kameleon.Client(server) as client:
        with pytest.raises(kameleon.NotFound) as missing:
            client.get_session("no-such-session")
        assert missing.value.status == 404 and "no such session" in missing.value.detail
        with pytest.raises(kameleon.Invalid) as invalid:
            client.create_session(2, algorithm="no-such-algorithm")
        assert invalid.value.status == 422
        assert any("algorithm" in e["field"] for e in invalid.value.errors)
        with pytest.raises(kameleon.Invalid):
            client.create_session(2, initial=[[0.0, 0.0, 0.0]])  # wrong dimension

        session = client.create_session(1, chains=2, seed=1, warmup=0, max_iterations=5)
        asked = client.ask(session.id, max=2)
        a, b = asked.proposals
        client.tell(session.id, [(a.id, -1.0)])
        # The same id with another value: 409 naming it; nothing of the request applied.
        with pytest.raises(kameleon.Conflict) as conflict:
            client.tell(session.id, [(b.id, -2.0), (a.id, -3.0)])
        assert conflict.value.status == 409 and conflict.value.ids == [a.id]
        assert client.tell(session.id, [(b.id, -2.0)])[0].outcome == "initialized"
        with pytest.raises(kameleon.Conflict) as never:
            client.tell(session.id, [("c0.i99", -1.0)])
        assert never.value.ids == ["c0.i99"]
        # NaN never leaves the client.
        with pytest.raises(ValueError, match="log density"):
            client.tell(session.id, [("c0.i1", math.nan)])
        assert isinstance(conflict.value, kameleon.KameleonError)


def test_api_keys_go_in_x_api_key() -> None:
    key = "s3cret-key"
    port = free_port()
    env = clean_env(api_key_hashes=json.dumps([hashlib.sha256(key.encode()).hexdigest()]))
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        with kameleon.Client(url, api_key=key) as client:
            session = client.create_session(1, seed=1)
            assert client.get_session(session.id).id == session.id
        with (
            kameleon.Client(url, api_key="wrong") as intruder,
            pytest.raises(kameleon.Unauthorized) as refused,
        ):
            intruder.get_session(session.id)
        assert refused.value.status in (401, 403)
        with kameleon.Client(url, api_key="") as anonymous, pytest.raises(kameleon.Unauthorized):
            anonymous.list_sessions()


def test_max_iterations_is_the_default_given_or_open_ended(server: str) -> None:
    # Omitted: the service's default (warm-up + 2000); open_ended=True sends an explicit
    # null (no end but a stopping rule); both at once is a mistake caught before sending.
    with kameleon.Client(server) as client:
        default = client.create_session(2, warmup=10)
        given = client.create_session(2, warmup=10, max_iterations=50)
        endless = client.create_session(2, warmup=10, open_ended=True)
        assert default.max_iterations == 10 + 2000
        assert given.max_iterations == 50
        assert endless.max_iterations is None
        with pytest.raises(ValueError, match="not both"):
            client.create_session(2, max_iterations=50, open_ended=True)

    async def main() -> int | None:
        async with kameleon.AsyncClient(server) as client:
            return (await client.create_session(2, open_ended=True)).max_iterations

    assert asyncio.run(main()) is None


def test_leases_are_renewed_and_handed_back(server: str) -> None:
    with kameleon.Client(server) as client:
        session = client.create_session(2, chains=2, seed=3, warmup=10)
        first = client.ask(session.id, max=2, lease_seconds=5).proposals
        (renewed,) = client.renew_leases(session.id, [first[0].id], 600)
        assert renewed.id == first[0].id and renewed.lease_expires_at is not None
        assert first[0].lease_expires_at is not None
        assert renewed.lease_expires_at > first[0].lease_expires_at
        (back,) = client.release_leases(session.id, [first[1].id])
        assert back.lease_expires_at is None
        (again,) = client.ask(session.id, max=2).proposals
        assert (again.id, again.x) == (first[1].id, first[1].x)
        client.tell(session.id, [(first[0].id, -1.0)])
        with pytest.raises(kameleon.Conflict, match="told already"):
            client.renew_leases(session.id, [first[0].id], 60)
        with pytest.raises(ValueError, match="positive"):
            client.renew_leases(session.id, [again.id], 0)

        async def main() -> list[kameleon.models.Lease]:
            async with kameleon.AsyncClient(server) as aclient:
                return await aclient.release_leases(session.id, [again.id])

        assert [lease.lease_expires_at for lease in asyncio.run(main())] == [None]


def test_the_async_client_speaks_the_same_protocol(server: str) -> None:
    async def main() -> tuple[Draws, int]:
        async with kameleon.AsyncClient(server) as client:
            assert (await client.health()).ok
            session = await client.create_session(
                2, chains=2, seed=5, warmup=10, max_iterations=130
            )
            answer = await client.ask(session.id, max=2)
            while answer.proposals:
                results = [(p.id, _normal(p.x)) for p in answer.proposals]
                answer = await client.step(session.id, results, max=2)
            listed = [s.id async for s in client.iter_sessions(limit=2)]
            assert session.id in listed
            draws = await client.draws(session.id)
            npy = await client.draws(session.id, format="npy")
            assert npy.draws.tobytes() == draws.draws.tobytes()
            diagnostics = await client.diagnostics(session.id)
            await client.delete_session(session.id)
            with pytest.raises(kameleon.NotFound):
                await client.get_session(session.id)
            return draws, diagnostics.draws

    draws, n = asyncio.run(main())
    assert draws.draws.shape == (2, 120, 2) and n == 120
    # The blocking client, on the same seed and values, gets the same draws.
    with kameleon.Client(server) as client:
        session = client.create_session(2, chains=2, seed=5, warmup=10, max_iterations=130)
        _run(client, session.id, batch=2)
        assert client.draws(session.id).draws.tobytes() == draws.draws.tobytes()
