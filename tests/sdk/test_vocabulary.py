"""One vocabulary on every surface, and an in-process run that behaves as a Python user
expects: the shared defaults, ``None`` as minus infinity, parallel and vectorised
evaluations, the memory refusal, interruptions, joining a session, grouped warnings."""

from __future__ import annotations

import _thread
import inspect
import re
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import kameleon
from kameleon.core.diagnostics.findings import SamplingWarning
from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.core.running.inprocess import Interrupted
from tests.sdk.test_cli import cli, one_line_error

ROOT = Path(__file__).resolve().parents[2]


def normal(x: npt.NDArray[np.float64]) -> float:
    # np.sum, as the vectorised form below: x @ x may round differently (BLAS, FMA).
    return -0.5 * float(np.sum(x * x))


# ------------------------------------------------------------------- one vocabulary


def test_every_surface_takes_its_defaults_from_one_place() -> None:
    from kameleon.cli import _parser
    from kameleon.core.running.inprocess import sample as core_sample
    from kameleon.core.running.inprocess import sample_chains
    from kameleon.service.app import create_app

    want = {"chains": CHAINS, "iterations": ITERATIONS, "warmup": WARMUP}
    for fn in (kameleon.sample, core_sample, sample_chains):
        parameters = inspect.signature(fn).parameters
        assert {k: parameters[k].default for k in want} == want, fn

    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    run = sub.choices["run"]  # type: ignore[index]
    assert {k: run.get_default(k) for k in want} == want

    schema = create_app().openapi()["components"]["schemas"]["SessionCreate"]["properties"]
    assert schema["chains"]["default"] == CHAINS
    assert schema["warmup"]["default"] == WARMUP
    assert f"warmup + {ITERATIONS}" in schema["max_iterations"]["description"]
    assert f"warmup + {ITERATIONS}" in (ROOT / "openapi.yaml").read_text()

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| word |") :]
    for word, value in (("iterations", ITERATIONS), ("warmup", WARMUP), ("chains", CHAINS)):
        row = next(line for line in table.splitlines() if line.startswith(f"| `{word}`"))
        assert f"{value}" in row, row


# ------------------------------------------------------------------------ in process


def test_none_is_minus_infinity_in_process() -> None:
    def half(x: npt.NDArray[np.float64]) -> float | None:
        return None if x[0] < 0 else normal(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        result = kameleon.sample(
            half, initial=[1.0, 0.0], iterations=300, warmup=200, seed=1, progress=False
        )
    assert (result.draws[..., 0] >= 0).all()


def test_workers_evaluate_at_once_with_the_same_draws() -> None:
    """Four chains, four workers: the four proposals of an iteration are evaluated
    together (seen, not timed), and the draws are those of one worker."""
    lock, running, most = threading.Lock(), [0], [0]
    overlap = threading.Event()

    def slow(x: npt.NDArray[np.float64]) -> float:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] > 1:
                overlap.set()
        # Wait (a bounded time) for another evaluation to start meanwhile: on a loaded
        # machine a fixed sleep may end before the next thread is scheduled.
        overlap.wait(timeout=0.2)
        with lock:
            running[0] -= 1
        return normal(x)

    args: dict[str, Any] = {"dim": 2, "iterations": 40, "warmup": 40, "seed": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        one = kameleon.sample(normal, progress=False, **args)
        four = kameleon.sample(slow, progress=False, workers=4, **args)
        vector = kameleon.sample(
            lambda xs: -0.5 * np.sum(xs * xs, axis=1), progress=False, vectorize=True, **args
        )
        processes = kameleon.sample(normal, progress=False, workers=2, parallel="processes", **args)
    assert most[0] > 1
    for other in (four, vector, processes):
        assert np.array_equal(one.draws, other.draws)


def test_a_vectorised_density_must_return_one_value_per_point() -> None:
    with pytest.raises(ValueError, match="values for"):
        kameleon.sample(lambda xs: np.zeros(1), dim=2, vectorize=True, progress=False)


def test_a_run_too_large_for_memory_is_refused_before_allocating() -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"would need about .* GB of memory"):
        kameleon.sample(normal, dim=20_000, progress=False)
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="max_bytes"):
        kameleon.sample(normal, dim=2, progress=False, max_bytes=1000)


def test_an_interrupted_run_returns_what_it_drew() -> None:
    calls = [0]

    def interrupted(x: npt.NDArray[np.float64]) -> float:
        calls[0] += 1
        if calls[0] == 4 * 150:
            raise KeyboardInterrupt
        return normal(x)

    with pytest.warns(Interrupted, match="interrupted after"):
        result = kameleon.sample(interrupted, dim=2, warmup=100, seed=1, progress=False)
    assert result.draws.shape[:2] == (4, 148 - 100)  # 4 initial points, then 4 per step


def test_warnings_are_grouped_once_per_kind_with_what_to_try() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = kameleon.sample(normal, dim=3, iterations=30, warmup=10, seed=1, progress=False)
    emitted = [w.message for w in caught if isinstance(w.message, SamplingWarning)]
    codes = [w.finding.code for w in emitted]
    assert len(codes) == len(set(codes)) == len({f.code for f in result.warnings})
    assert len(result.warnings) > len(codes)  # several findings of one kind, one line
    lines = result.warning_lines()
    assert sum(line.startswith("warning [") for line in lines) == len(codes)
    assert any(line.strip().startswith("try:") for line in lines)
    assert "x0, x1, x2" in "\n".join(lines)


def test_to_arviz_has_acceptance_and_the_runs_attributes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        result = kameleon.sample(normal, dim=2, iterations=200, warmup=100, seed=1, progress=False)
    data = result.to_arviz()
    assert data.sample_stats["accepted"].shape == (4, 200)
    assert float(data.sample_stats["accepted"].mean()) == pytest.approx(
        float(np.nanmean(result.acceptance))
    )
    assert data.sample_stats["acceptance_rate"].shape == (4, 200)
    assert data.attrs["seed"] == 1 and data.attrs["algorithm"] == "am"


# ------------------------------------------------------------------ through a service


@pytest.mark.slow
def test_join_a_session_by_id_and_read_it_back(server: str) -> None:
    with kameleon.Client(server) as client:
        session = client.create_session(2, chains=2, seed=5, warmup=50, max_iterations=150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        joined = kameleon.sample(normal, url=server, session=session.id, workers=2, progress=False)
    assert joined.session == session.id and joined.draws.shape == (2, 100, 2)
    again = kameleon.Result.from_session(server, session.id)
    assert np.array_equal(again.draws, joined.draws)
    assert again.accepted is not None and again.accepted.shape == (2, 100)
    data = again.to_arviz()
    assert data.attrs["session"] == session.id
    assert data.sample_stats["accepted"].shape == (2, 100)


@pytest.mark.slow
def test_ctrl_c_through_a_service_says_how_to_go_on(server: str) -> None:
    calls = [0]

    def interrupting(x: npt.NDArray[np.float64]) -> float:
        calls[0] += 1
        if calls[0] == 200:
            _thread.interrupt_main()
        return normal(x)

    with pytest.warns(Interrupted) as caught:
        partial = kameleon.sample(
            interrupting, dim=2, url=server, seed=1, progress=False, warmup=50, iterations=1000
        )
    message = str(caught[0].message)
    assert partial.session is not None and f"session={partial.session!r}" in message
    # The interrupted worker handed its proposals back: all four chains are free now,
    # not when their leases run out.
    with kameleon.Client(server) as client:
        assert len(client.ask(partial.session, max=4, lease_seconds=0.01).proposals) == 4
    # Going on: the session is joined and finished.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        done = kameleon.sample(normal, url=server, session=partial.session, progress=False)
    assert done.draws.shape == (4, 1000, 2)


def test_a_finished_run_is_extended_and_goes_on_where_it_stopped(server: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        first = kameleon.sample(
            normal, dim=2, url=server, seed=2, warmup=50, iterations=100, progress=False
        )
        assert first.session is not None
        longer = kameleon.sample(
            normal, url=server, session=first.session, iterations=300, extend=True,
            progress=False,
        )  # fmt: skip
        # The same seed and values in one run of 300: the same draws.
        whole = kameleon.sample(
            normal, dim=2, url=server, seed=2, warmup=50, iterations=300, progress=False
        )
    assert longer.session == first.session and longer.draws.shape == (4, 300, 2)
    assert np.array_equal(longer.draws[:, :100], first.draws)
    assert np.array_equal(longer.draws, whole.draws)
    with pytest.raises(ValueError, match="above that"):
        kameleon.sample(normal, url=server, session=first.session, iterations=200, extend=True)
    with pytest.raises(ValueError, match="session="):
        kameleon.sample(normal, dim=2, extend=True)


INTERRUPTING_TARGET = textwrap.dedent(
    """
    import os, signal
    calls = [0]

    def logp(x):
        calls[0] += 1
        if calls[0] == 200:
            os.kill(os.getpid(), signal.SIGINT)
        return -0.5 * float(x @ x)
    """
)


@pytest.mark.slow
def test_cli_run_interrupted_names_the_session_and_joins_it(server: str, tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(INTERRUPTING_TARGET)
    run = cli(
        "run", "model:logp", "--dim", "2", "--warmup", "50", "--iterations", "2000",
        "--url", server, "--no-progress", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 130, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    match = re.search(r"session (\S+) on ", run.stderr)
    assert match, run.stderr
    assert f"--session {match[1]}" in run.stderr
    (tmp_path / "model.py").write_text("def logp(x):\n    return -0.5 * float(x @ x)\n")
    joined = cli(
        "run", "model:logp", "--session", match[1], "--url", server, "--no-progress",
        cwd=tmp_path,
    )  # fmt: skip
    assert joined.returncode == 0, joined.stderr
    assert "4 chains x 2000 draws" in joined.stdout
    extended = cli(
        "run", "model:logp", "--session", match[1], "--url", server, "--no-progress",
        "--extend", "--iterations", "2200", cwd=tmp_path,
    )  # fmt: skip
    assert extended.returncode == 0, extended.stderr
    assert "4 chains x 2200 draws" in extended.stdout
    # Warnings are printed once each (in the summary, not also as Python warnings).
    assert "SamplingWarning" not in joined.stderr


def test_cli_ctrl_c_before_any_session_is_one_line(tmp_path: Path) -> None:
    # Interrupted while loading the model (the first moments of a run): no traceback.
    (tmp_path / "model.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\ndef logp(x):\n    return 0.0\n"
    )
    run = cli("run", "model:logp", "--dim", "2", "--no-progress", cwd=tmp_path)
    assert run.returncode == 130, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "kameleon: interrupted" in run.stderr


@pytest.mark.filterwarnings("ignore::kameleon.core.diagnostics.findings.SamplingWarning")
def test_ctrl_c_before_the_workers_start_keeps_the_session(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between the create and the workers' start: the session exists, so the run returns
    # it as it stands and says how to go on, as an interruption later does.
    import kameleon.remote

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(kameleon.remote, "_drive", interrupted)
    with pytest.warns(Interrupted) as caught:
        partial = kameleon.sample(normal, dim=2, url=server, seed=1, progress=False)
    assert partial.session is not None
    assert f"session={partial.session!r}" in str(caught[0].message)
    assert partial.draws.shape[1] == 0


def test_an_interactive_command_names_the_url_it_cannot_reach() -> None:
    started = time.monotonic()
    run = cli("sessions", "list", "--url", "http://127.0.0.1:9")
    line = one_line_error(run, 1)
    assert "http://127.0.0.1:9" in line and "cannot reach" in line
    assert "retrying" not in run.stderr
    assert time.monotonic() - started < 30  # the interpreter's start-up, no retries
