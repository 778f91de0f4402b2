"""Replay: the same seed and the same told values give the same draws, bit for bit, for
every algorithm: in process, on the memory store, on the Redis store, and through two
service processes on one Redis that take alternate requests (PROTOCOL.md, guarantee 4).

The runs are long enough for every kernel sampler to fit its surrogate several times
(KMC finite folds its ``200 x 200`` factor every 20 iterations after its first fit), which
is where a multithreaded BLAS used to make the arithmetic depend on the thread count:
the in-process run here deliberately has two BLAS threads around it, and the service
processes are started with two.
"""

from __future__ import annotations

import functools
import io
import json
import math
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from kameleon.core import SAMPLERS
from kameleon.core.running.batch import ARRAY_PHILOX_MIN
from kameleon.core.running.initial import initial_point
from kameleon.core.running.inprocess import run_chain, sample
from tests.servers import KAMELEON, free_port, serving

pytestmark = pytest.mark.slow  # every algorithm through every store and two processes

DIM, CHAINS, WARMUP, ITERATIONS, SEED = 4, 2, 300, 60, 23
Post = Callable[[str, dict[str, Any]], dict[str, Any]]


def logdensity(x: Any) -> float:
    """A 4-d banana with a cut: bent, and ``-inf`` where ``x[3] > 2.5``."""
    v = np.asarray(x, dtype=np.float64)
    if v[3] > 2.5:
        return -math.inf
    return -0.5 * (v[0] ** 2 / 4 + (v[1] - 0.3 * v[0] ** 2) ** 2 + v[2] ** 2 + v[3] ** 2)


def gradient(x: Any) -> list[float]:
    """``logdensity``'s gradient (told to every sampler; those without gradients ignore
    it)."""
    v = np.asarray(x, dtype=np.float64)
    bend = v[1] - 0.3 * v[0] ** 2
    return [-v[0] / 4 + 0.6 * v[0] * bend, -bend, -v[2], -v[3]]


#: Options an algorithm cannot go without: sgld is told a model of one datum whose log
#: prior is ``logdensity`` (and its log likelihood 0), so its told value is the target's.
OPTIONS: dict[str, dict[str, Any]] = {"sgld": {"data_size": 1}}
#: Shorter transitions for the two service processes, whose every request is one
#: evaluation per chain over HTTP: at hmc's 4 steps, nuts's depth 3, tempering's 8 rungs
#: and gibbs's 4 one-coordinate blocks, these four took 7 800 of that test's 11 400
#: requests (3 700 now, of 7 300). Every kind of evaluation (initial point, gradient check,
#: leapfrog point, a trajectory's end, a tree's doubling, a rung's step and a swap, a
#: block's update) still goes from one process to the other; the other tests replay the
#: defaults through both stores.
SHORT_TRAJECTORIES: dict[str, dict[str, Any]] = {
    "hmc": {"num_steps": 2},
    "nuts": {"max_tree_depth": 2},
    "tempering": {"temperatures": 3},
    "gibbs": {"blocks": [{"indices": [0, 1]}, {"indices": [2, 3]}]},
}


def _options(algorithm: str, short: bool) -> dict[str, Any]:
    extra = SHORT_TRAJECTORIES.get(algorithm, {}) if short else {}
    return {**OPTIONS.get(algorithm, {}), **extra}


def _evaluate(algorithm: str) -> Callable[..., Any]:
    """The log density as ``algorithm`` needs it: with its gradient, alone, or in parts."""
    if SAMPLERS[algorithm].evaluation.parts:
        return lambda x, batch: (logdensity(x), 0.0, np.array(gradient(x)), np.zeros(DIM))
    if SAMPLERS[algorithm].evaluation.gradient:
        return lambda x: (logdensity(x), np.array(gradient(x)))
    return logdensity


def _json(value: float) -> float | None:
    return None if value == -math.inf else value


def in_process(algorithm: str, short: bool = False) -> np.ndarray:
    """The in-process draws with the options of ``OPTIONS`` now (and
    ``SHORT_TRAJECTORIES`` if ``short``): computed once per algorithm and options in a
    test process (several tests compare with them), and read-only, so that no test can
    change another's."""
    return _in_process(algorithm, json.dumps(_options(algorithm, short), sort_keys=True))


@functools.cache
def _in_process(algorithm: str, options: str) -> np.ndarray:
    with threadpool_limits(limits=2, user_api="blas"):  # run_chain must not care
        draws = sample(
            _evaluate(algorithm),
            DIM,
            algorithm=algorithm,
            chains=CHAINS,
            warmup=WARMUP,
            iterations=ITERATIONS,
            seed=SEED,
            options=json.loads(options),
            warn=False,
        )
    draws.setflags(write=False)
    return draws


def _result(p: dict[str, Any]) -> dict[str, Any]:
    """A told result for proposal ``p``: sgld's parts where it carries a minibatch."""
    value = _json(logdensity(p["x"]))
    if p.get("minibatch") is None:
        return {"id": p["id"], "log_density": value, "gradient": gradient(p["x"])}
    return {
        "id": p["id"],
        "log_prior": value,
        "log_likelihood": 0.0,
        "prior_gradient": gradient(p["x"]),
        "gradient": [0.0] * DIM,
    }


def served(
    posts: list[Post], get: Callable[[str], httpx.Response], algorithm: str, short: bool = False
) -> np.ndarray:
    """Drive a session through ``posts`` in turn (one request each) and read its draws."""
    body = {
        "algorithm": algorithm,
        "dim": DIM,
        "chains": CHAINS,
        "seed": SEED,
        "warmup": WARMUP,
        "max_iterations": WARMUP + ITERATIONS,
        "options": _options(algorithm, short),
    }
    sid = posts[0]("/v1/sessions", body)["id"]
    answer = posts[1 % len(posts)](f"/v1/sessions/{sid}/ask", {"max": CHAINS})
    turn = 0
    while answer["proposals"]:
        results = [_result(p) for p in answer["proposals"]]
        turn += 1
        answer = posts[turn % len(posts)](
            f"/v1/sessions/{sid}/step", {"results": results, "max": CHAINS}
        )
    response = get(f"/v1/sessions/{sid}/draws?format=npy")
    assert response.status_code == 200, response.text
    return np.load(io.BytesIO(response.content))  # type: ignore[no-any-return]


def _poster(client: Any) -> Post:
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = client.post(path, json=body)
        assert response.status_code in (200, 201), response.text
        answer: dict[str, Any] = response.json()
        return answer

    return post


@pytest.mark.parametrize("algorithm", sorted(SAMPLERS))
def test_in_process_draws_do_not_depend_on_blas_threads(algorithm: str) -> None:
    one = sample(
        _evaluate(algorithm),
        DIM,
        algorithm=algorithm,
        chains=CHAINS,
        warmup=WARMUP,
        iterations=ITERATIONS,
        seed=SEED,
        options=OPTIONS.get(algorithm),
        warn=False,
    )
    assert one.tobytes() == in_process(algorithm).tobytes()


@pytest.mark.parametrize("algorithm", sorted(SAMPLERS))
def test_every_store_gives_the_in_process_draws(
    algorithm: str, start_client: Callable[..., Any]
) -> None:
    expected = in_process(algorithm)
    for store in ("memory", "redis"):
        client = start_client(store)
        draws = served([_poster(client)], client.get, algorithm)
        assert draws.shape == expected.shape
        assert draws.tobytes() == expected.tobytes(), f"{algorithm} on {store}"


def test_a_random_split_ensemble_gives_the_in_process_draws_on_every_store(
    start_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random split draws its halves from the chain's random numbers, so a session
    replays bit for bit, and its draws are not the fixed split's (the option is used)."""
    fixed = in_process("ensemble")
    monkeypatch.setitem(OPTIONS, "ensemble", {"split": "random"})
    expected = in_process("ensemble")
    assert expected.tobytes() != fixed.tobytes()
    for store in ("memory", "redis"):
        client = start_client(store)
        draws = served([_poster(client)], client.get, "ensemble")
        assert draws.tobytes() == expected.tobytes(), store


def test_a_waste_free_smc_gives_the_in_process_draws_on_every_store(
    start_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waste-free stages hand out a step of their chains as a round and set other
    particles than they move from; a session replays them bit for bit, and its draws are
    not the default's (the option is used)."""
    default = in_process("smc")
    monkeypatch.setitem(OPTIONS, "smc", {"waste_free": 4})
    expected = in_process("smc")
    assert expected.tobytes() != default.tobytes()
    for store in ("memory", "redis"):
        client = start_client(store)
        draws = served([_poster(client)], client.get, "smc")
        assert draws.tobytes() == expected.tobytes(), store


@pytest.mark.slow
def test_two_service_processes_taking_turns_give_the_in_process_draws(
    redis_url: str, redis_prefix: str
) -> None:
    ports = [free_port(), free_port()]
    env = {
        "KAMELEON_STORE": "redis",
        "KAMELEON_REDIS_URL": redis_url,
        "KAMELEON_REDIS_PREFIX": redis_prefix,
        "OPENBLAS_NUM_THREADS": "2",  # the service must not care either
    }
    with (
        serving([KAMELEON, "serve", "--port", str(ports[0])], env, ports[0]) as a,
        serving([KAMELEON, "serve", "--port", str(ports[1])], env, ports[1]) as b,
        httpx.Client(base_url=a, timeout=60) as client_a,
        httpx.Client(base_url=b, timeout=60) as client_b,
    ):
        for algorithm in sorted(SAMPLERS):
            posts = [_poster(client_a), _poster(client_b)]
            draws = served(posts, client_a.get, algorithm, short=True)
            assert draws.tobytes() == in_process(algorithm, short=True).tobytes(), algorithm


@pytest.mark.parametrize("algorithm", ["rwm", "am"])
def test_a_step_of_many_chains_steps_them_together_with_the_same_draws(
    algorithm: str, start_client: Callable[..., Any]
) -> None:
    """Enough chains per ``step`` for the array Philox (core.running.batch): the service's draws
    are the in-process run's (whose chains are stepped side by side too), and each is
    the draw of that chain run alone (core.running.inprocess.run_chain)."""
    chains, warmup, iterations = ARRAY_PHILOX_MIN + 4, 30, 20
    body = {
        "algorithm": algorithm,
        "dim": DIM,
        "chains": chains,
        "seed": SEED,
        "warmup": warmup,
        "max_iterations": warmup + iterations,
    }
    expected = sample(
        logdensity,
        DIM,
        algorithm=algorithm,
        chains=chains,
        warmup=warmup,
        iterations=iterations,
        seed=SEED,
        warn=False,
    )
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(DIM, {}, warmup=warmup)
    for c in (0, chains - 1):
        start = initial_point(DIM, seed=SEED, chain=c, attempt=0, center=None, radius=2.0)
        alone = run_chain(
            sampler, params, logdensity, start, warmup + iterations, seed=SEED, chain=c
        )
        assert alone.draws[warmup:].tobytes() == expected[c].tobytes()
    for store in ("memory", "redis"):
        client = start_client(store)
        post = _poster(client)
        sid = post("/v1/sessions", body)["id"]
        answer = post(f"/v1/sessions/{sid}/ask", {"max": chains})
        while answer["proposals"]:
            results = [
                {"id": p["id"], "log_density": _json(logdensity(p["x"]))}
                for p in answer["proposals"]
            ]
            answer = post(f"/v1/sessions/{sid}/step", {"results": results, "max": chains})
        draws = np.load(io.BytesIO(client.get(f"/v1/sessions/{sid}/draws?format=npy").content))
        assert draws.tobytes() == expected.tobytes(), store
