"""What the clients retry, and what they do not, against a scripted transport; and a run
that survives its service being stopped and restarted (the Redis store keeps the
session)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
import numpy as np
import orjson
import pytest

import kameleon
from kameleon.core.running.inprocess import sample as core_sample
from tests.sdk.conftest import clean_env
from tests.servers import KAMELEON, free_port, serving

PROBLEM = {"Content-Type": "application/problem+json"}
HEALTH = {"status": "ok", "store": "memory", "store_ready": True, "version": "0"}


def scripted(
    answers: list[Callable[[httpx.Request], httpx.Response]],
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that answers with each of ``answers`` in turn (the last repeats)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    return httpx.MockTransport(handle), seen


def unavailable(_: httpx.Request) -> httpx.Response:
    body = {"type": "x", "title": "Store unavailable", "status": 503, "detail": "down"}
    return httpx.Response(503, json=body, headers=PROBLEM)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def lost(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset", request=request)


def healthy(_: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=HEALTH)


def created(_: httpx.Request) -> httpx.Response:
    return httpx.Response(201, json={"id": "s1", "dim": 1, "chains": 1, "status": "warmup"})


def quick(transport: httpx.BaseTransport, retry_seconds: float = 10.0) -> kameleon.Client:
    return kameleon.Client(
        "http://sdk.test", transport=transport, retry_seconds=retry_seconds, retry_max_wait=0.01
    )


def test_503_and_refused_connections_are_retried() -> None:
    transport, seen = scripted([unavailable, refused, unavailable, healthy])
    with quick(transport) as client:
        assert client.health().ok
    assert len(seen) == 4


def test_a_lost_answer_is_retried_for_a_tell_and_for_a_create_with_its_key() -> None:
    told = {"results": [{"id": "c0.i1", "chain": 0, "outcome": "duplicate"}]}
    transport, seen = scripted([lost, lambda _: httpx.Response(200, json=told)])
    with quick(transport) as client:
        assert client.tell("s1", [("c0.i1", -1.0)])[0].outcome == "duplicate"
    assert len(seen) == 2 and seen[0].content == seen[1].content  # the same body again

    transport, seen = scripted([lost, created])
    with quick(transport) as client:
        assert client.create_session(1).id == "s1"  # repeated with its idempotency key
    assert len(seen) == 2
    keys = [r.headers["Idempotency-Key"] for r in seen]
    assert keys[0] == keys[1] and len(keys[0]) == 32 and seen[0].content == seen[1].content

    transport, seen = scripted([refused, created])
    with quick(transport) as client:
        assert client.create_session(1).id == "s1"  # never arrived: repeated
    assert len(seen) == 2


def test_errors_that_retrying_cannot_mend_are_raised_at_once() -> None:
    body = {"type": "x", "title": "Not found", "status": 404, "detail": "no such session"}
    transport, seen = scripted([lambda _: httpx.Response(404, json=body, headers=PROBLEM)])
    with quick(transport) as client, pytest.raises(kameleon.NotFound):
        client.get_session("s1")
    assert len(seen) == 1


def test_retries_stop_after_retry_seconds() -> None:
    transport, seen = scripted([unavailable])
    started = time.monotonic()
    with quick(transport, retry_seconds=0.3) as client, pytest.raises(kameleon.Unavailable):
        client.health()
    assert 0.3 <= time.monotonic() - started < 5 and len(seen) > 2


def test_a_non_problem_error_answer_is_still_a_kameleon_error() -> None:
    transport, _ = scripted([lambda _: httpx.Response(418, text="<html>teapot</html>")])
    with quick(transport) as client, pytest.raises(kameleon.KameleonError) as error:
        client.health()
    assert error.value.status == 418 and "teapot" in str(error.value)


def test_the_async_client_retries_too() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return unavailable(request) if len(seen) < 3 else healthy(request)

    async def main() -> bool:
        async with kameleon.AsyncClient(
            "http://sdk.test", transport=httpx.MockTransport(handle), retry_max_wait=0.01
        ) as client:
            return (await client.health()).ok

    assert asyncio.run(main()) and len(seen) == 3


# ---------------------------------------------------------------- a real restart


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::kameleon.core.diagnostics.findings.SamplingWarning")
def test_a_run_survives_a_restart_of_its_service(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The service is stopped a third of the way through a run and started again on the
    same port and store: the run completes with the in-process draws, so no result was
    lost or applied twice."""
    chains, warmup, iterations, seed = 2, 150, 450, 11
    port = free_port()
    argv = [KAMELEON, "serve", "--port", str(port)]
    env = clean_env(store="redis", redis_url=redis_url, redis_prefix=redis_prefix)
    calls = 0
    third = threading.Event()

    def density(x: np.ndarray) -> float:
        nonlocal calls
        calls += 1
        if calls > chains * (warmup + iterations) // 3:
            third.set()
        time.sleep(0.001)  # slow enough for the restart to fall inside the run
        return -0.5 * float(x @ x) - 0.1 * float(x[0] ** 4)

    outcome: dict[str, object] = {}

    def run(url: str) -> None:
        try:
            outcome["result"] = kameleon.sample(
                density,
                dim=2,
                chains=chains,
                warmup=warmup,
                iterations=iterations,
                seed=seed,
                url=url,
                workers=2,
                progress=False,
                lease_seconds=5,
                retry_seconds=60,
            )
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    first = serving(argv, env, port)
    url = first.__enter__()
    worker = threading.Thread(target=run, args=(url,))
    worker.start()
    try:
        assert third.wait(timeout=120), "the run did not get a third of the way"
    finally:
        first.__exit__(None, None, None)  # stopped mid-run
    stopped_at = calls
    time.sleep(0.5)
    with serving(argv, env, port) as again, kameleon.Client(again) as client:
        worker.join(timeout=300)
        assert not worker.is_alive() and "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        assert isinstance(result, kameleon.Result) and result.session is not None
        summary = client.get_session(result.session)
    # Every transition's value applied once, each chain's initial point once.
    assert summary.evaluations == chains * (warmup + iterations + 1)
    assert any("retrying" in r.getMessage() for r in caplog.records)  # it was down
    assert stopped_at < chains * (warmup + iterations)  # the stop did fall inside the run
    expected = core_sample(
        density,
        2,
        chains=chains,
        warmup=warmup,
        iterations=iterations,
        seed=seed,
        warn=False,
    )
    assert result.draws.tobytes() == expected.tobytes()


class _LosesTheFirstAnswer(httpx.HTTPTransport):
    """Forwards every request to the server, but loses the answer to the first ask."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/ask"):
            self.bodies.append(request.content)
            if len(self.bodies) == 1:
                response.read()
                raise httpx.ReadError("the answer was lost", request=request)
        return response


def test_an_ask_whose_answer_was_lost_gets_its_proposals_on_the_retry(server: str) -> None:
    transport = _LosesTheFirstAnswer()
    with kameleon.Client(server, transport=transport, retry_max_wait=0.01) as client:
        sid = client.create_session(algorithm="rwm", dim=2, chains=2, seed=1).id
        try:
            answer = client.ask(sid, max=2)
            # Without the request id, both chains would be leased to the lost answer and
            # the retry would get none for the whole lease.
            assert sorted(p.chain for p in answer.proposals) == [0, 1]
            first, retry = (orjson.loads(b) for b in transport.bodies)
            assert first["request_id"] == retry["request_id"]
            assert client.ask(sid, max=2).proposals == []  # a new request: nothing free
        finally:
            client.delete_session(sid)
