"""``kameleon.sample``: in process and through a service (memory and Redis stores), with
1, 2 and 4 workers, the same seed gives the same draws, log densities and acceptance."""

from __future__ import annotations

import math
import re
import threading
import time
import warnings

import numpy as np
import pytest

import kameleon
from kameleon.core.running.inprocess import sample as core_sample
from tests.sdk.conftest import clean_env
from tests.servers import KAMELEON, free_port, serving

CHAINS, WARMUP, ITERATIONS, SEED = 4, 200, 300, 21


def banana(x: np.ndarray) -> float:
    """A bent 2-d target, ``-inf`` past a cut-off (module level: picklable)."""
    if x[0] > 6.0:
        return -math.inf
    y = x[1] - 0.1 * x[0] ** 2
    return -0.5 * (x[0] ** 2 / 4.0 + y**2)


def run(**kwargs: object) -> kameleon.Result:
    """``kameleon.sample`` on the banana with the shared settings, warnings kept quiet."""
    settings: dict[str, object] = {
        "dim": 2,
        "chains": CHAINS,
        "warmup": WARMUP,
        "iterations": ITERATIONS,
        "seed": SEED,
        "progress": False,
    }
    settings.update(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        return kameleon.sample(banana, **settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def local() -> kameleon.Result:
    return run()


def test_in_process_it_is_core_run_sample_with_more_to_say(local: kameleon.Result) -> None:
    expected = core_sample(
        banana, 2, chains=CHAINS, warmup=WARMUP, iterations=ITERATIONS, seed=SEED, warn=False
    )
    assert local.draws.tobytes() == expected.tobytes()
    assert local.draws.shape == (CHAINS, ITERATIONS, 2) and local.seed == SEED
    assert local.session is None and local.param_names == ["x0", "x1"]
    expected_lp = [[banana(x) for x in chain] for chain in local.draws]
    np.testing.assert_array_equal(local.log_density, expected_lp)
    assert local.acceptance.shape == (CHAINS,) and np.all(
        (local.acceptance > 0.05) & (local.acceptance < 0.9)
    )
    assert [p.name for p in local.diagnostics.parameters] == ["x0", "x1"]
    assert local.diagnostics.draws == ITERATIONS


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_through_a_service_the_same_seed_gives_the_same_run(
    server: str, local: kameleon.Result, workers: int
) -> None:
    served = run(url=server, workers=workers)
    assert served.session is not None and served.url == server + "/v1"
    assert served.draws.tobytes() == local.draws.tobytes()
    assert served.log_density.tobytes() == local.log_density.tobytes()
    # The service counts acceptances, and so does the in-process run: the same.
    np.testing.assert_array_equal(served.acceptance, local.acceptance)
    assert [w.code for w in served.warnings] == [w.code for w in local.warnings]
    for a, b in zip(served.diagnostics.parameters, local.diagnostics.parameters, strict=True):
        assert a.name == b.name and a.mean == pytest.approx(b.mean, rel=1e-12)
        assert a.r_hat == pytest.approx(b.r_hat, rel=1e-9)


@pytest.mark.slow
def test_evaluations_in_a_process_pool_give_the_same_draws(
    server: str, local: kameleon.Result
) -> None:
    served = run(url=server, workers=2, parallel="processes")
    assert served.draws.tobytes() == local.draws.tobytes()


@pytest.mark.slow
def test_on_the_redis_store_too(redis_url: str, redis_prefix: str, local: kameleon.Result) -> None:
    port = free_port()
    env = clean_env(store="redis", redis_url=redis_url, redis_prefix=redis_prefix)
    with serving([KAMELEON, "serve", "--port", str(port)], env, port) as url:
        served = run(url=url, workers=2)
        with kameleon.Client(url) as client:
            assert client.health().store == "redis"
    assert served.draws.tobytes() == local.draws.tobytes()
    np.testing.assert_array_equal(served.acceptance, local.acceptance)


def test_warnings_are_emitted_and_kept(server: str) -> None:
    # 30 draws per chain: every ESS is far under 100 per chain, in process and served.
    for url in (None, server):
        with pytest.warns(kameleon.SamplingWarning) as caught:
            result = kameleon.sample(
                banana, dim=2, chains=2, warmup=50, iterations=30, seed=1, url=url, progress=False
            )
        codes = {w.code for w in result.warnings}
        assert {"ess_bulk", "ess_tail"} <= codes, url
        emitted = [w.message for w in caught if isinstance(w.message, kameleon.SamplingWarning)]
        # One warning per kind, in the order of the findings, each kept in full.
        kinds = list(dict.fromkeys(w.code for w in result.warnings))
        assert [w.finding.code for w in emitted] == kinds


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["am", "kameleon", "kmc-finite", "kmc-lite", "rwm"])
def test_a_flat_target_returns_with_one_warning_that_names_the_cause(algorithm: str) -> None:
    # An improper target, the user's mistake: no exception, no numpy warning, and one
    # SamplingWarning that says what is likely wrong (not a dozen about R-hat and ESS).
    # The default warm-up (where the scales adapt and the chains run off), 400 draws
    # after it instead of 2 000: the adapted scale is then fixed, so the later draws
    # only random-walk further (by sqrt(2000 / 400), nowhere near an overflow), and the
    # kernel samplers' surrogates spent most of the default run's time (kmc-lite 18 s of
    # CPU, 7 s now).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("error", RuntimeWarning)
        result = kameleon.sample(
            lambda x: 0.0, dim=2, algorithm=algorithm, iterations=400, progress=False, seed=1
        )
    assert np.all(np.isfinite(result.draws)) and result.draws.shape == (4, 400, 2)
    assert [type(w.message) for w in caught] == [kameleon.SamplingWarning]
    assert [w.code for w in result.warnings] == ["improper"]
    assert "improper (not normalisable)" in str(caught[0].message)
    assert "missing prior" in str(caught[0].message)


def test_seed_none_draws_one_and_records_it() -> None:
    first = run(seed=None, iterations=50, warmup=50)
    assert isinstance(first.seed, int) and first.seed >= 0
    again = run(seed=first.seed, iterations=50, warmup=50)
    assert again.draws.tobytes() == first.draws.tobytes()


def test_dim_comes_from_initial_and_options_reach_the_algorithm(server: str) -> None:
    result = run(dim=None, initial=[1.0, 0.5], url=server, iterations=50, initial_scale=0.5)
    assert result.dim == 2
    with kameleon.Client(server) as client:
        assert result.session is not None
        session = client.get_session(result.session)
    assert session.options["initial_scale"] == 0.5
    local = run(dim=None, initial=[1.0, 0.5], iterations=50, initial_scale=0.5)
    assert local.draws.tobytes() == result.draws.tobytes()
    other = run(dim=None, initial=[1.0, 0.5], iterations=50)
    assert other.draws.tobytes() != result.draws.tobytes()  # the option did change the run


def test_param_names_name_the_parameters_and_warnings() -> None:
    result = run(param_names=["alpha", "beta"], iterations=30, warmup=30)
    assert result.param_names == ["alpha", "beta"]
    assert [p.name for p in result.diagnostics.parameters] == ["alpha", "beta"]
    named = [w for w in result.warnings if w.parameter is not None]
    assert named and all(w.parameter in ("alpha", "beta") for w in named)
    assert all("x0" not in w.message and "x1" not in w.message for w in named)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="dim"):
        kameleon.sample(banana, progress=False)
    with pytest.raises(ValueError, match="coordinates"):
        kameleon.sample(banana, dim=3, initial=[0.0, 0.0], progress=False)
    with pytest.raises(ValueError, match="workers"):
        kameleon.sample(banana, dim=2, workers=0, progress=False)
    with pytest.raises(ValueError, match="param_names"):
        kameleon.sample(banana, dim=2, param_names=["a"], progress=False)


def test_an_initial_point_outside_the_support_is_an_error_either_way(server: str) -> None:
    for url in (None, server):
        with pytest.raises(ValueError, match="initial point"):
            kameleon.sample(banana, initial=[7.0, 0.0], chains=2, url=url, progress=False)


def test_the_service_refuses_what_it_cannot_run(server: str) -> None:
    with pytest.raises(kameleon.Invalid):
        run(url=server, no_such_option=1)


def test_an_error_in_the_log_density_stops_every_worker(server: str) -> None:
    def failing(x: np.ndarray) -> float:
        if x[0] > 1.0:
            raise RuntimeError("the model failed")
        return banana(x)

    with pytest.raises(RuntimeError, match="the model failed"):
        kameleon.sample(failing, dim=2, url=server, workers=3, seed=3, progress=False)
    for url in (None, server):
        with pytest.raises(ValueError, match=r"(?i)nan|log density must be"):
            kameleon.sample(lambda x: math.nan, dim=2, url=url, progress=False)


def test_the_progress_bar_runs(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    for url in (None, server):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", kameleon.SamplingWarning)
            kameleon.sample(banana, dim=2, chains=2, warmup=50, iterations=100, seed=1, url=url)
        err = capsys.readouterr().err
        assert "sampling" in err and "eval/s" in err, url
        assert "300/300" in err if url is not None else "302/302" in err
        if url is not None:  # the session's page in the dashboard, first
            assert re.search(rf"watch it at {re.escape(url)}/ui/sessions/\w+", err), err


def test_a_stopping_rule_ends_both_runs_at_the_same_draw(server: str) -> None:
    rule = {"rhat": 1.05, "ess": 100, "check_every": 200}
    settings = {"seed": 3, "warmup": 300, "iterations": 3000, "stop": rule}
    local = run(**settings)
    served = run(url=server, **settings)
    # Met at a check before the end: a multiple of check_every draws per chain.
    assert local.draws.shape[1] < 3000 and local.draws.shape[1] % 200 == 0
    assert served.draws.tobytes() == local.draws.tobytes()


def banana_and_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
    """The banana with its gradient, for ``mala`` (module level: picklable)."""
    y = x[1] - 0.1 * x[0] ** 2
    value = -0.5 * (x[0] ** 2 / 4.0 + y**2)
    return value, np.array([-x[0] / 4.0 + 0.2 * x[0] * y, -y])


def test_mala_runs_with_gradients_in_process_and_through_a_service(server: str) -> None:
    settings: dict[str, object] = {
        "dim": 2,
        "chains": 2,
        "warmup": 100,
        "iterations": 100,
        "seed": 4,
        "algorithm": "mala",
        "progress": False,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        local = kameleon.sample(banana_and_gradient, **settings)  # type: ignore[arg-type]
        served = kameleon.sample(banana_and_gradient, url=server, workers=2, **settings)  # type: ignore[arg-type]
    # The same told values in another order: the same draws, bit for bit.
    assert local.draws.tobytes() == served.draws.tobytes()
    assert np.isfinite(local.draws).all() and local.draws.shape == (2, 100, 2)


def test_nuts_statistics_reach_the_result_and_arviz_either_way(server: str) -> None:
    settings: dict[str, object] = {
        "dim": 2,
        "chains": 2,
        "warmup": 60,
        "iterations": 60,
        "seed": 8,
        "algorithm": "nuts",
        "progress": False,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        local = kameleon.sample(banana_and_gradient, **settings)  # type: ignore[arg-type]
        served = kameleon.sample(banana_and_gradient, url=server, **settings)  # type: ignore[arg-type]
    names = {"step_size", "tree_depth", "n_steps", "diverging", "energy"}
    assert set(local.sample_stats) == set(served.sample_stats) == names
    for name in names:
        assert local.sample_stats[name].shape == (2, 60)
        assert local.sample_stats[name].tobytes() == served.sample_stats[name].tobytes(), name
    stats = local.to_arviz().sample_stats
    assert {"diverging", "energy", "tree_depth", "n_steps", "step_size"} <= set(stats.data_vars)


def test_sgld_is_refused_with_where_to_run_it() -> None:
    with pytest.raises(ValueError, match="sample_chains"):
        kameleon.sample(banana, dim=2, algorithm="sgld", options={"data_size": 10})


class _Concurrency:
    """A log density that records how many of its calls ran at once, at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def __call__(self, x: np.ndarray) -> float:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.002)
        with self.lock:
            self.running -= 1
        return banana(x)


@pytest.mark.slow
def test_a_population_is_evaluated_side_by_side_with_the_in_process_draws(server: str) -> None:
    """smc hands out a sweep's particles together (a round): four workers evaluate one
    chain's particles at once, and the draws are the in-process run's."""
    settings: dict[str, object] = {
        "dim": 2,
        "chains": 1,
        "warmup": 160,
        "iterations": 64,
        "seed": SEED,
        "progress": False,
        "algorithm": "smc",
        "particles": 16,
    }
    density = _Concurrency()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        local = kameleon.sample(banana, **settings)  # type: ignore[arg-type]
        served = kameleon.sample(density, url=server, workers=4, **settings)  # type: ignore[arg-type]
    assert served.draws.tobytes() == local.draws.tobytes()
    assert density.most == 4  # one chain, four points at once
