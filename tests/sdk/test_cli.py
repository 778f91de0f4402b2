"""The ``kameleon`` command line, run as a process against a live service.

Each command's output is checked, and so is each failure: one line on stderr, no
traceback, exit status 2 for a bad argument or setting and 1 for a refused request.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import kameleon
from tests.servers import KAMELEON, free_port

TARGET = textwrap.dedent(
    """
    import numpy as np

    def logp(x):
        return -0.5 * float(np.sum((x - 3.0) ** 2))
    """
)


def cli(
    *argv: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    return subprocess.run(
        [KAMELEON, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def one_line_error(run: subprocess.CompletedProcess[str], status: int) -> str:
    assert run.returncode == status, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("kameleon: error:")]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


def test_version_and_help_show_every_setting() -> None:
    assert cli("--version").stdout.strip() == f"kameleon {kameleon.__version__}"
    text = cli("serve", "--help").stdout
    from kameleon.service.config import Settings

    for name in Settings.model_fields:
        assert f"--{name.replace('_', '-')}" in text and f"KAMELEON_{name.upper()}" in text
    assert "default: 8000" in text


def test_a_bad_setting_or_argument_is_one_line() -> None:
    assert "KAMELEON_PORT" in one_line_error(cli("serve", "--port", "eighty"), 2)
    assert "MODULE:FUNCTION" in one_line_error(cli("run", "nocolon", "--dim", "2"), 2)


@pytest.fixture
def session(server: str) -> Iterator[str]:
    with kameleon.Client(server) as client:
        s = client.create_session(
            2, algorithm="rwm", chains=2, seed=3, warmup=20, max_iterations=70
        )
        answer = client.ask(s.id, max=2)
        while answer.proposals:
            results = [(p.id, -0.5 * float(np.dot(p.x, p.x))) for p in answer.proposals]
            answer = client.step(s.id, results, max=2)
        yield s.id
        with contextlib.suppress(kameleon.NotFound):
            client.delete_session(s.id)


def test_sessions_list_show_delete(server: str, session: str) -> None:
    listing = cli("sessions", "list", "--url", server)
    assert listing.returncode == 0 and session in listing.stdout
    shown = cli("sessions", "show", session, "--url", server)
    assert shown.returncode == 0, shown.stderr
    assert "rwm" in shown.stdout and "r_hat" in shown.stdout and "x1" in shown.stdout
    as_json = cli("sessions", "show", session, "--url", server, "--json")
    assert '"algorithm": "rwm"' in as_json.stdout
    assert cli("sessions", "delete", session, "--url", server).returncode == 0
    error = one_line_error(cli("sessions", "show", session, "--url", server), 1)
    assert "no such session" in error.lower()


@pytest.mark.parametrize("fmt", ["csv", "npy", "getdist", "netcdf"])
def test_export_writes_every_page(server: str, session: str, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / ("draws." + {"getdist": "txt", "netcdf": "nc"}.get(fmt, fmt))
    if fmt == "getdist":
        out = tmp_path / "chains"
    run = cli("export", session, "--url", server, "--format", fmt, "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "2x50x2" in run.stdout  # 2 chains x 50 post-warm-up draws x dim 2
    with kameleon.Client(server) as client:
        expected = client.draws(session).draws
    if fmt == "csv":
        rows = out.read_text().splitlines()
        assert rows[0] == "chain,draw,log_density,x0,x1" and len(rows) == 1 + 100
    elif fmt == "npy":
        assert np.array_equal(np.load(out), expected)
    elif fmt == "getdist":
        first = np.loadtxt(tmp_path / "chains_1.txt")
        assert np.allclose(first[:, 2:], expected[0])
        assert (tmp_path / "chains.paramnames").exists()
    else:
        import arviz

        data = arviz.from_netcdf(out)
        assert np.allclose(data.posterior["x0"].values, expected[:, :, 0])


@pytest.mark.slow
def test_run_samples_a_python_log_density(server: str, tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(TARGET)
    for where in ([], ["--url", server, "--workers", "2"]):
        run = cli(
            "run", "model:logp", "--dim", "2", "--iterations", "400", "--warmup", "300",
            "--seed", "1", "--no-progress", "--out", str(tmp_path / "draws.csv"), *where,
            cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert ("session" in run.stdout) == bool(where)
        draws = np.loadtxt(tmp_path / "draws.csv", delimiter=",", skiprows=1)
        # 4 chains x 400 draws of N(3, 1): the mean within 0.25 (about 5 MCSE at an ESS
        # of a few hundred).
        assert abs(draws[:, 3:].mean() - 3.0) < 0.25, draws[:, 3:].mean()


UMBRIDGE_SERVER = textwrap.dedent(
    """
    import math, sys
    import umbridge

    class Gaussian(umbridge.Model):
        def __init__(self):
            super().__init__("forward")
        def get_input_sizes(self, config):
            return [2]
        def get_output_sizes(self, config):
            return [1]
        def __call__(self, parameters, config):
            x = parameters[0]
            if x[0] > 2.5:
                raise ValueError("the solver diverged")
            if x[0] < -2.5:
                return [[math.nan]]
            return [[-0.5 * (x[0] ** 2 + x[1] ** 2)]]
        def supports_evaluate(self):
            return True

    class Smooth(umbridge.Model):
        # N((1, 0), diag(1, 4)) as a log density with its gradient; a wrong gradient
        # (its second coordinate doubled) under the config {"wrong": true}.
        def __init__(self):
            super().__init__("smooth")
        def get_input_sizes(self, config):
            return [2]
        def get_output_sizes(self, config):
            return [1]
        def __call__(self, parameters, config):
            x = parameters[0]
            return [[-0.5 * ((x[0] - 1) ** 2 + x[1] ** 2 / 4)]]
        def gradient(self, out_wrt, in_wrt, parameters, sens, config):
            x = parameters[0]
            k = 2 if config.get("wrong") else 1
            return [sens[0] * -(x[0] - 1), sens[0] * -k * x[1] / 4]
        def supports_evaluate(self):
            return True
        def supports_gradient(self):
            return True

    # serve_models binds every interface: keep the test's server on loopback.
    from aiohttp import web
    run_app = web.run_app
    web.run_app = lambda app, **kw: run_app(app, **{**kw, "host": "127.0.0.1"})
    umbridge.serve_models([Gaussian(), Smooth()], int(sys.argv[1]), max_workers=2)
    """
)


@pytest.fixture
def umbridge_model(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("umbridge")
    script = tmp_path / "model_server.py"
    script.write_text(UMBRIDGE_SERVER)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # its access log would fill an unread pipe
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/Info", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "no UM-Bridge server"
            time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_drive_umbridge_samples_a_model_and_survives_its_failures(
    server: str, umbridge_model: str
) -> None:
    run = cli(
        "drive-umbridge", "--url", server, "--model-url", umbridge_model, "--chains", "4",
        "--iterations", "300", "--warmup", "200", "--seed", "2", "--concurrency", "2",
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    session = run.stdout.splitlines()[0].removeprefix("session ").strip()
    assert "told as -inf" in run.stderr  # the model's errors and NaN, with warnings
    with kameleon.Client(server) as client:
        summary = client.get_session(session)
        draws = client.draws(session).draws
        client.delete_session(session)
    assert summary.status == "done" and draws.shape == (4, 300, 2)
    # The model is N(0, I) truncated to |x0| <= 2.5, where it fails or answers NaN: the
    # draws stay inside, and their mean is near 0 (1200 draws; 0.3 is about 5 MCSE).
    assert np.all(np.abs(draws[:, :, 0]) <= 2.5)
    assert abs(draws.mean()) < 0.3 and math.isfinite(draws.std())


@pytest.mark.slow
def test_drive_umbridge_tells_the_models_gradient_to_a_gradient_sampler(
    server: str, umbridge_model: str
) -> None:
    run = cli(
        "drive-umbridge", "--url", server, "--model-url", umbridge_model, "--model", "smooth",
        "--algorithm", "mala", "--chains", "4", "--iterations", "300", "--warmup", "200",
        "--seed", "3", "--concurrency", "2",
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "told as -inf" not in run.stderr, run.stderr
    session = run.stdout.splitlines()[0].removeprefix("session ").strip()
    with kameleon.Client(server) as client:
        summary = client.get_session(session)
        draws = client.draws(session).draws
        client.delete_session(session)
    assert summary.algorithm == "mala" and summary.status == "done"
    assert draws.shape == (4, 300, 2)
    # One evaluation per transition (mala; nuts would take tens, each a round trip to
    # the model), the initial points and the first chain's gradient check (2 dim) too.
    assert sum(c.evaluations for c in summary.chain_summaries) == 4 * 501 + 4
    # N((1, 0), diag(1, 4)): 1200 draws of mala (ESS ~100 or more); 0.3 and 0.6 are
    # about 3 MCSE at ESS 100, the sds within 25% (~3.5 standard errors).
    mean, sd = draws.reshape(-1, 2).mean(axis=0), draws.reshape(-1, 2).std(axis=0)
    assert abs(mean[0] - 1) < 0.3 and abs(mean[1]) < 0.6, mean
    assert abs(sd[0] - 1) < 0.25 and abs(sd[1] - 2) < 0.5, sd


@pytest.mark.slow
def test_drive_umbridge_refuses_a_gradient_sampler_without_a_gradient(
    server: str, umbridge_model: str
) -> None:
    """The model without Gradient on mala: a usage error before any session exists; a
    wrong gradient: the service's gradient check stops the session, naming the
    coordinate."""
    with kameleon.Client(server) as client:
        before = {s.id for s in client.iter_sessions()}
    run = cli(
        "drive-umbridge", "--url", server, "--model-url", umbridge_model, "--algorithm", "mala",
    )  # fmt: skip
    error = one_line_error(run, 2)
    assert "'mala' needs the log density's gradient" in error and "Gradient" in error, error
    with kameleon.Client(server) as client:
        assert {s.id for s in client.iter_sessions()} == before

    run = cli(
        "drive-umbridge", "--url", server, "--model-url", umbridge_model, "--model", "smooth",
        "--model-config", '{"wrong": true}', "--algorithm", "mala", "--chains", "2",
        "--iterations", "10", "--warmup", "10", "--seed", "4",
        timeout=120,
    )  # fmt: skip
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "gradient" in run.stderr and "1" in run.stderr, run.stderr
