"""The clients in ``clients/``, each built and run against a live service.

Each client creates a session on the truncated banana B(b=0.03, v=25) (log density -inf
outside ``|y2 - b (y1^2 - v)| <= 4``) and samples it with two worker processes through
a proxy that injects a 503, a refused connection, a lost answer and a conflicting tell
(see ``proxy.py``). The test then checks, over HTTP, that every chain ran to the end and
that the posterior is right.

Tolerances. The run is 64 chains x 500 iterations of adaptive Metropolis, the first 250
warm-up: 16 000 draws with a bulk ESS of about 700-1 000 per coordinate (measured; the
chains start spread over +-1.5 sd of y1 on the ridge). The truncation is symmetric in the
untwisted coordinate, so the true mean is exactly 0 and Var y1 = v = 25 exactly; Var y2
= Var(u2 given |u2| <= 4) + 2 b^2 v^2 = 0.99893 + 1.125. A mean must be within
4 x MCSE (the service's estimate) plus a floor of 0.05 sd: a 4-sigma bound, with the
floor for an MCSE estimated on short chains. A variance must be within 30%: its
relative standard error at this ESS is about sqrt(2 / ESS) ~ 5%, so 30% fails only a
sampler that is wrong. The seed is fixed and the told values are deterministic (the
service gives the same draws for the same told values, whatever the order of the
workers), so the run, and the outcome of the check, is the same every time.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.proxy import Faults, faulty_proxy

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"

# ITERATIONS: draws kept per chain after warm-up (KAMELEON_ITERATIONS).
CHAINS, ITERATIONS, WARMUP, WORKERS = 64, 250, 250, 2
B, V, BAND = 0.03, 25.0, 4.0
_PHI_BAND = math.exp(-(BAND**2) / 2) / math.sqrt(2 * math.pi)
_MASS_BAND = math.erf(BAND / math.sqrt(2))
VARIANCES = (V, 1 - 2 * BAND * _PHI_BAND / _MASS_BAND + 2 * B**2 * V**2)

pytestmark = [pytest.mark.clients, pytest.mark.slow]


def _missing(reason: str) -> None:
    """Under CI a missing toolchain fails the test (CI installs them); elsewhere it skips."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (.ci/run installs it)")
    pytest.skip(reason)


def _need_commands(*commands: str) -> None:
    absent = [c for c in commands if shutil.which(c) is None]
    if absent:
        _missing(f"not on PATH: {', '.join(absent)}")


def _need_c_libraries() -> None:
    _need_commands("cc", "make")
    probe = "#include <curl/curl.h>\n#include <cjson/cJSON.h>\n"
    found = subprocess.run(
        ["cc", "-E", "-x", "c", "-"], input=probe, capture_output=True, text=True
    )
    if found.returncode != 0:
        _missing("no libcurl or cJSON headers (Debian: libcurl4-openssl-dev libcjson-dev)")


def _make(directory: Path, out: Path) -> list[str]:
    built = subprocess.run(
        ["make", "-C", str(directory), f"OUT={out}"], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return [str(out / "banana")]


def _c(out: Path) -> list[str]:
    _need_c_libraries()
    return _make(CLIENTS / "c", out)


def _fortran(out: Path) -> list[str]:
    _need_c_libraries()
    _need_commands("gfortran")
    return _make(CLIENTS / "fortran", out)


def _javascript(out: Path) -> list[str]:
    _need_commands("node")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
    if int(version.lstrip("v").split(".")[0]) < 18:  # global fetch
        _missing(f"node {version.strip()} is older than 18")
    return ["node", str(CLIENTS / "javascript" / "banana.mjs")]


def _bash(out: Path) -> list[str]:
    _need_commands("bash", "curl", "jq", "awk")
    return ["bash", str(CLIENTS / "bash" / "banana.sh")]


def _r(out: Path) -> list[str]:
    _need_commands("Rscript")
    loaded = subprocess.run(
        ["Rscript", "-e", "library(httr); library(jsonlite)"], capture_output=True, text=True
    )
    if loaded.returncode != 0:
        _missing("R packages httr and jsonlite (Debian: r-cran-httr r-cran-jsonlite)")
    return ["Rscript", str(CLIENTS / "r" / "banana.R")]


BUILDERS: dict[str, Callable[[Path], list[str]]] = {
    "c": _c,
    "fortran": _fortran,
    "javascript": _javascript,
    "bash": _bash,
    "r": _r,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[str]]:
    """``built(client)``: the client's command, each built once for the module's tests."""
    argvs: dict[str, list[str]] = {}

    def build(client: str) -> list[str]:
        if client not in argvs:
            argvs[client] = BUILDERS[client](tmp_path_factory.mktemp(client))
        return argvs[client]

    return build


@pytest.mark.parametrize("client", list(BUILDERS))
def test_client_samples_the_banana_through_faults(
    client: str, service_url: str, built: Callable[[str], list[str]]
) -> None:
    argv = built(client)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    with faulty_proxy(service_url, Faults()) as proxy:
        env |= {
            "KAMELEON_URL": proxy.url,
            "KAMELEON_CHAINS": str(CHAINS),
            "KAMELEON_ITERATIONS": str(ITERATIONS),
            "KAMELEON_WARMUP": str(WARMUP),
            "KAMELEON_WORKERS": str(WORKERS),
            "KAMELEON_SEED": "1",
            # Short leases: a lost answer strands its proposals until they run out.
            "KAMELEON_LEASE_SECONDS": "2",
        }
        started = time.monotonic()
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
        elapsed = time.monotonic() - started
        faults = proxy.faults
    output = f"{client} ({elapsed:.1f} s)\n{run.stdout}\n{run.stderr}"
    print(output)
    assert run.returncode == 0, output

    # Two processes shared the work, and every proposal was evaluated.
    workers = re.findall(
        r"^worker (\d+): (\d+) log densities, (\d+) outside the support$", run.stdout, re.M
    )
    assert sorted(int(w) for w, _, _ in workers) == list(range(WORKERS)), output
    assert all(int(n) > 0 for _, n, _ in workers), output
    assert sum(int(n) for _, n, _ in workers) >= CHAINS * (WARMUP + ITERATIONS + 1), output

    # -inf was met and told as null.
    assert sum(int(k) for _, _, k in workers) > 0, output
    assert faults.nulls > 0

    # Every fault was injected and survived: the results of a refused, unavailable or
    # lost request were sent again; the one told first by a rival was not.
    assert not faults.errors
    assert faults.injected == {"unavailable": 2, "refused": 2, "lost": 1, "rival": 1}
    assert all(faults.told[i] >= 2 for i in faults.retry_expected), faults.told
    assert all(faults.told[i] == 1 for i in faults.rival_ids), faults.told

    match = re.search(r"^session (\S+)$", run.stdout, re.M)
    assert match, output
    url = f"{service_url}/v1/sessions/{match[1]}"
    summary = httpx.get(url).json()
    assert summary["status"] == "done"
    assert [c["iterations"] for c in summary["chain_summaries"]] == [WARMUP + ITERATIONS] * CHAINS

    diagnostics = _check_posterior(url)

    # The service's warnings are shown, one line per kind.
    codes = {w["code"] for w in diagnostics["warnings"]}
    shown = re.findall(r"^warning \[(\w+)\]", run.stdout, re.M)
    assert sorted(shown) == sorted(codes), output


def _check_posterior(url: str) -> dict[str, Any]:
    """The session's diagnostics, after checking its posterior mean and variances."""
    diagnostics: dict[str, Any] = httpx.get(url + "/diagnostics").json()
    for p, variance in zip(diagnostics["parameters"], VARIANCES, strict=True):
        tolerance = 4 * p["mcse_mean"] + 0.05 * math.sqrt(variance)
        assert abs(p["mean"]) <= tolerance, (p, tolerance)
        assert abs(p["sd"] ** 2 / variance - 1) <= 0.3, (p, variance)
    return diagnostics


# Gradient mode: each client on a gradient sampler, telling the banana's analytic
# gradient. `mala` (one evaluation per transition) for the clients that evaluate slowly
# (a process per batch in bash, R), `nuts` (tens of leapfrog points per transition) for
# the others. Either way the first chain's first transition is the gradient check (2 dim
# points of kind `gradient_check`, told with outcome `step`), which a wrong gradient
# fails. Measured on the C client: mala, 16 x (300 + 300), bulk ESS ~300 (y1) and ~500;
# nuts, 8 x (200 + 200), ~900 and ~1 400, so the same tolerances as above hold.
GRADIENT_RUNS = {
    "c": ("nuts", 8, 200, 200),
    "fortran": ("nuts", 8, 200, 200),
    "javascript": ("nuts", 8, 200, 200),
    "bash": ("mala", 16, 300, 300),
    "r": ("mala", 16, 300, 300),
}


@pytest.mark.parametrize("client", list(BUILDERS))
def test_client_samples_the_banana_with_its_gradient(
    client: str, service_url: str, built: Callable[[str], list[str]]
) -> None:
    argv = built(client)
    algorithm, chains, warmup, iterations = GRADIENT_RUNS[client]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    env |= {
        "KAMELEON_URL": service_url,
        "KAMELEON_ALGORITHM": algorithm,
        "KAMELEON_CHAINS": str(chains),
        "KAMELEON_ITERATIONS": str(iterations),
        "KAMELEON_WARMUP": str(warmup),
        "KAMELEON_WORKERS": str(WORKERS),
        "KAMELEON_SEED": "1",
    }
    started = time.monotonic()
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    output = (
        f"{client} {algorithm} ({time.monotonic() - started:.1f} s)\n{run.stdout}\n{run.stderr}"
    )
    print(output)
    assert run.returncode == 0, output

    workers = re.findall(
        r"^worker (\d+): (\d+) log densities, (\d+) outside the support$", run.stdout, re.M
    )
    assert sorted(int(w) for w, _, _ in workers) == list(range(WORKERS)), output
    told = sum(int(n) for _, n, _ in workers)
    match = re.search(r"^session (\S+)$", run.stdout, re.M)
    assert match, output
    url = f"{service_url}/v1/sessions/{match[1]}"
    summary = httpx.get(url).json()
    assert summary["algorithm"] == algorithm
    assert summary["status"] == "done", summary.get("stopped_by")
    chains_out = summary["chain_summaries"]
    assert [c["iterations"] for c in chains_out] == [warmup + iterations] * chains
    # Every evaluation the service counts was told by the workers, the gradient check's
    # 2 dim points included (and, for nuts, the leapfrog points: many per transition).
    evaluations = sum(c["evaluations"] for c in chains_out)
    assert told == evaluations, (told, evaluations)
    assert evaluations >= chains * (warmup + iterations + 1) + 2 * len(VARIANCES)
    if algorithm == "nuts":
        assert evaluations > 3 * chains * (warmup + iterations), evaluations
    _check_posterior(url)


@pytest.mark.parametrize("client", list(BUILDERS))
def test_client_says_so_when_nothing_is_after_warm_up(
    client: str, service_url: str, built: Callable[[str], list[str]]
) -> None:
    """KAMELEON_ITERATIONS=0: no table of NaNs, a line that says why there is none, and
    the service's warnings (too_few_draws) shown."""
    argv = built(client)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    env |= {
        "KAMELEON_URL": service_url,
        "KAMELEON_CHAINS": "4",
        "KAMELEON_ITERATIONS": "0",
        "KAMELEON_WARMUP": "20",
        "KAMELEON_WORKERS": "1",
    }
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    output = f"{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, output
    assert "no draws after warm-up yet" in run.stdout, output
    assert "nan" not in run.stdout.lower(), output


def test_client_defaults_are_the_shared_ones() -> None:
    """Every client documents and uses the defaults of core/interface/defaults.py."""
    from kameleon.core.interface.defaults import CHAINS as chains
    from kameleon.core.interface.defaults import ITERATIONS as iterations
    from kameleon.core.interface.defaults import WARMUP as warmup

    sources = {
        "bash": CLIENTS / "bash" / "banana.sh",
        "c": CLIENTS / "c" / "banana.c",
        "fortran": CLIENTS / "fortran" / "banana.f90",
        "javascript": CLIENTS / "javascript" / "banana.mjs",
        "r": CLIENTS / "r" / "banana.R",
    }
    for name, path in sources.items():
        text = path.read_text()
        for variable, value in (
            ("CHAINS", chains),
            ("ITERATIONS", iterations),
            ("WARMUP", warmup),
        ):
            documented = re.search(rf"KAMELEON_{variable}\s+.*\(default (\d+)\)", text)
            assert documented and int(documented[1]) == value, (name, variable)
            used = re.search(rf"""KAMELEON_{variable}(?:"|\}}|:-)?[,)]?\s*:?-?\s*(\d+)""", text)
            assert used and int(used[1]) == value, (name, variable)
        assert "draws kept per chain after warm-up" in text, name


# The JavaScript Gibbs client (clients/javascript/gibbs.mjs): the normal model with
# unknown mean and precision, y_i ~ N(mu, 1 / tau), mu ~ N(0, 1 / KAPPA),
# tau ~ Gamma(A, B), its data y_i = 1 + 2 sin(1.7 i + 0.3), i < 30. The client draws mu
# from its full conditional (kind conditional); the service updates tau by
# Metropolis-Hastings.
GIBBS_Y = [1 + 2 * math.sin(1.7 * i + 0.3) for i in range(30)]
GIBBS_KAPPA, GIBBS_A, GIBBS_B = 0.01, 2.0, 1.0


def _gibbs_exact_means() -> tuple[float, float]:
    """``E[mu | y]`` and ``E[tau | y]`` by quadrature over ``tau``: given ``tau``, mu is
    normal with mean ``tau sum(y) / (KAPPA + n tau)``, and ``tau``'s marginal posterior is,
    up to a constant, ``tau^(A - 1 + n / 2) e^(-B tau) (KAPPA + n tau)^(-1/2)
    exp(-tau sum(y^2) / 2 + (tau sum(y))^2 / (2 (KAPPA + n tau)))``. 20 000 points over
    (0, 20] (the posterior of tau sits near 0.5, with an sd of about 0.13) give both
    means to far better than the tolerance."""
    n, s, s2 = len(GIBBS_Y), sum(GIBBS_Y), sum(y * y for y in GIBBS_Y)
    taus = [20.0 * (k + 0.5) / 20_000 for k in range(20_000)]
    logs = []
    for t in taus:
        p = GIBBS_KAPPA + n * t
        logs.append(
            (GIBBS_A - 1 + n / 2) * math.log(t)
            - GIBBS_B * t
            - 0.5 * math.log(p)
            - t * s2 / 2
            + (t * s) ** 2 / (2 * p)
        )
    top = max(logs)
    weights = [math.exp(v - top) for v in logs]
    total = sum(weights)
    mu = sum(w * t * s / (GIBBS_KAPPA + n * t) for w, t in zip(weights, taus, strict=True))
    tau = sum(w * t for w, t in zip(weights, taus, strict=True))
    return mu / total, tau / total


def test_javascript_client_draws_a_conditional_block(
    service_url: str, built: Callable[[str], list[str]]
) -> None:
    """The posterior means of mu and tau within 4 x MCSE (the service's) plus a floor
    of 0.02 sd, as for the banana: a 4-sigma bound, the floor for an MCSE estimated on
    short chains. 4 chains x 600 post-warm-up sweeps: the conditional draw of mu makes
    its draws nearly independent (bulk ESS in the thousands, measured)."""
    argv = [built("javascript")[0], str(CLIENTS / "javascript" / "gibbs.mjs")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    env |= {
        "KAMELEON_URL": service_url,
        "KAMELEON_CHAINS": "4",
        "KAMELEON_ITERATIONS": "600",
        "KAMELEON_WARMUP": "200",
    }
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    output = f"{run.stdout}\n{run.stderr}"
    print(output)
    assert run.returncode == 0, output
    match = re.search(r"^session (\S+)$", run.stdout, re.M)
    assert match, output
    url = f"{service_url}/v1/sessions/{match[1]}"
    summary = httpx.get(url).json()
    assert summary["status"] == "done" and summary["algorithm"] == "gibbs"
    drawn = re.search(r"^conditional draws: (\d+)$", run.stdout, re.M)
    assert drawn and int(drawn[1]) == 4 * 800, output  # one per sweep and chain
    diagnostics = httpx.get(url + "/diagnostics").json()
    for p, exact in zip(diagnostics["parameters"], _gibbs_exact_means(), strict=True):
        tolerance = 4 * p["mcse_mean"] + 0.02 * p["sd"]
        assert abs(p["mean"] - exact) <= tolerance, (p, exact, tolerance)
