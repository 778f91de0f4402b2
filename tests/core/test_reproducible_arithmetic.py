"""A chain's draws (and what each records with it: importance's log weight) do not
depend on the machine: the same bits under every BLAS kernel,
BLAS thread count, numpy CPU-feature set and glibc math build this CPU can run.

Each setting is a subprocess (they are fixed when a process starts) that runs every
sampler through its warm-up (scouting, adaptation windows, surrogate fits) and a few
hundred iterations after, and prints a hash of the draws. See core/numerics/arithmetic.py and
PROTOCOL.md, "Guarantees".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Options that bring each kernel method in early: its fits, preconditioner and adapted
# scales are all on the path of the draws compared.
OPTIONS: dict[str, dict[str, Any]] = {
    "rwm": {},
    "am": {"adapt_start": 20},
    "kameleon": {"subsample_size": 60},
    "kmc-lite": {"num_centres": 60, "min_history": 20, "update_every": 15},
    "kmc-finite": {"num_features": 40, "min_history": 20, "update_every": 10},
    "mala": {"metric": "dense"},
    "hmc": {"metric": "dense"},
    "nuts": {"metric": "dense"},
    # A model of one datum whose log prior is the banana (tell_one below), with steps
    # large enough to move: its schedule's pow1 and its noise are on trial.
    "sgld": {"data_size": 1, "step_size": 0.5, "step_offset": 1.0},
    "importance": {"adapt_start": 20},
    # Metropolis-Hastings blocks only (nothing here draws a conditional), one repeated.
    "gibbs": {"adapt_start": 20, "blocks": [{"indices": [0]}, {"indices": [2, 1], "speed": 2}]},
    # Both moves: the stretch factor's log and the differential evolution's noise.
    "ensemble": {"de_probability": 0.3},
    # Its windows then end within the warm-up: the rungs' covariances and the ladder.
    "tempering": {"adapt_start": 20},
    # Its stages end within the warm-up: the bisection, the weights and the resampling.
    "smc": {"particles": 16, "moves": 2},
}
DIM, WARMUP, ITERATIONS, CHAINS = 3, 200, 300, 2

SCRIPT = """
import hashlib, json, sys
import numpy as np
from kameleon.core import SAMPLERS
from kameleon.core.interface.chain import Parts
from kameleon.core.interface.sampler import tell_one

options, dim, warmup, iterations, chains = json.loads(sys.argv[1])

def banana(x):
    # Products, not ** (the C library's pow, whose last bit differs between its builds):
    # the told values must be the same bits in every setting for the draws to be.
    bend = x[1] + 0.3 * x[0] * x[0] - 1.2
    return -0.5 * float(x[0] * x[0] / 4 + bend * bend + x[2] * x[2])

def gradient(x):
    bend = x[1] + 0.3 * x[0] * x[0] - 1.2
    return np.array([-x[0] / 4 - 0.6 * x[0] * bend, -bend, -x[2]])

out = {}
for name, opts in options.items():
    sampler = SAMPLERS[name]
    params = sampler.make_params(dim, opts, warmup=warmup)
    digest = hashlib.sha256()
    kernel = True
    for chain in range(chains):
        state = sampler.init(np.full(dim, 0.5), params, seed=11, chain=chain)
        while state.iteration < iterations:
            proposal = sampler.ask(state, params)
            x = proposal.position
            parts = Parts(banana(x), 0.0, gradient(x), np.zeros(dim))
            state, _ = tell_one(
                sampler, state, params, proposal, banana(x), gradient(x), parts
            )
            digest.update(state.position.tobytes())
            digest.update(proposal.position.tobytes())
            # What a draw records besides its position: importance's log weight.
            digest.update(np.float64(getattr(state, "log_weight", 0.0)).tobytes())
        kernel = kernel and getattr(state, "bandwidth", 1.0) is not None
    out[name] = [digest.hexdigest(), kernel]
print(json.dumps(out))
"""


def _features() -> dict[str, bool]:
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # pragma: no cover - numpy 1
        from numpy.core._multiarray_umath import __cpu_features__
    return dict(__cpu_features__)


def _dispatched() -> list[str]:
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:  # pragma: no cover - numpy 1
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return list(__cpu_dispatch__)


def settings() -> dict[str, dict[str, str]]:
    """The settings to compare, each as the environment variables that make it; only
    those this CPU can run (an OpenBLAS kernel for instructions the CPU lacks would die
    of an illegal instruction)."""
    features = _features()
    out: dict[str, dict[str, str]] = {
        "default": {},
        "two-blas-threads": {"OPENBLAS_NUM_THREADS": "2"},
    }
    kernels = {
        "Prescott": "SSE3",
        "Sandybridge": "AVX",
        "Haswell": "AVX2",
        "Zen": "AVX2",
        "SkylakeX": "AVX512F",
    }
    for kernel, needs in kernels.items():
        if features.get(needs) and (needs == "SSE3" or features.get("FMA3", True)):
            out[kernel] = {"OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1"}
    if "X86_V3" in _dispatched():  # numpy 2.4's name for AVX2 + FMA3 and friends
        out["numpy-baseline-simd"] = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4"}
    elif "AVX2" in _dispatched():  # pragma: no cover - older numpy
        out["numpy-baseline-simd"] = {"NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 AVX512F"}
    if sys.platform == "linux" and features.get("FMA3"):
        # glibc's exp, log, sin, cos, pow without their FMA builds (as on a CPU without FMA)
        out["glibc-without-fma"] = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX"}
    return out


def _run(environment: dict[str, str]) -> subprocess.Popen[str]:
    names = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "NPY_DISABLE_CPU_FEATURES")
    env = {k: v for k, v in os.environ.items() if k not in names and k != "GLIBC_TUNABLES"}
    env.update(environment)
    argument = json.dumps([OPTIONS, DIM, WARMUP, ITERATIONS, CHAINS])
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, argument],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def hashes() -> dict[str, dict[str, list[Any]]]:
    """Every setting's draws, the subprocesses two at a time."""
    pending = list(settings().items())
    out: dict[str, dict[str, list[Any]]] = {}
    while pending:
        batch, pending = pending[:2], pending[2:]
        running = [(name, _run(env)) for name, env in batch]
        for name, process in running:
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, f"{name}: {stderr}"
            out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_the_settings_include_several_blas_kernels() -> None:
    if _features().get("AVX2") and _features().get("FMA3"):
        assert {"Prescott", "Sandybridge", "Haswell"} <= settings().keys()


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_draws_are_the_same_bits_in_every_setting(
    name: str, hashes: dict[str, dict[str, list[Any]]]
) -> None:
    reference, kernel = hashes["default"][name]
    assert kernel, f"{name}: the kernel method never ran; the test would prove little"
    differing = {s: h[name][0] for s, h in hashes.items() if h[name][0] != reference}
    assert not differing, f"{name}: draws differ from the default setting's in {sorted(differing)}"


def test_the_module_is_exact_where_it_says() -> None:
    from kameleon.core.numerics import arithmetic as a
    from kameleon.core.numerics import matrices

    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    assert np.allclose(matrices.matmul(A, B), A @ B, rtol=1e-14, atol=1e-14)
    assert np.array_equal(matrices.matvec(A, B[:, 0]), [matrices.dot(row, B[:, 0]) for row in A])
    assert np.allclose(matrices.vecmat(A[:, 0], A), A[:, 0] @ A, rtol=1e-14, atol=1e-14)
    # Large products go through BLAS, exactly: the result does not depend on how BLAS
    # sums, so it is the same for a transposed layout, and as accurate as BLAS's own.
    C, D = rng.standard_normal((90, 70)), rng.standard_normal((70, 80)) * 1e3
    big = matrices.matmul(C, D)
    assert np.array_equal(big, matrices.matmul(np.asfortranarray(C), np.asfortranarray(D)))
    assert np.allclose(big, C @ D, rtol=1e-13, atol=1e-10)
    x = np.concatenate([rng.uniform(-745, 709, 2000), rng.uniform(-1, 1, 2000)])
    assert np.array_equal(a.exp(x), [a.exp1(v) for v in x.tolist()])
    assert np.allclose(a.exp(x), np.exp(x), rtol=4e-16, atol=0)
    p = np.abs(x) + 1e-300
    assert np.array_equal(a.log(p), [a.log1(v) for v in p.tolist()])
    assert np.allclose(a.log(p), np.log(p), rtol=5e-16, atol=1e-300)
    assert np.allclose(a.sin(x[2000:] * 50), np.sin(x[2000:] * 50), rtol=0, atol=3e-16)
    assert np.allclose(a.cos(x[2000:] * 50), np.cos(x[2000:] * 50), rtol=0, atol=3e-16)
    S = A.T @ A + np.eye(5)
    L = matrices.cholesky(S)
    assert np.allclose(L @ L.T, S, rtol=1e-14, atol=1e-14)
    b = rng.standard_normal(5)
    assert np.allclose(L @ matrices.solve_lower(L, b), b, atol=1e-14)
    assert np.allclose(L.T @ matrices.solve_upper(L.T, b), b, atol=1e-14)
    with pytest.raises(np.linalg.LinAlgError):
        matrices.cholesky(-S)
    assert a.exp1(800.0) == np.inf and a.exp1(-800.0) == 0.0
    assert a.log1(0.0) == -np.inf and a.log1(1.0) == 0.0
    special = a.exp(np.array([800.0, -800.0, np.nan]))
    assert special[0] == np.inf and special[1] == 0.0 and np.isnan(special[2])


@pytest.mark.parametrize("dim", [1, 2, 6, 20])
def test_the_symmetric_eigensolver_is_accurate_and_independent_of_the_layout(dim: int) -> None:
    from kameleon.core.numerics import matrices

    rng = np.random.default_rng(dim)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    spectrum = np.logspace(-4, 3, dim)  # a window's ratios span orders of magnitude
    A = q @ np.diag(spectrum) @ q.T
    A = 0.5 * (A + A.T)
    w, V = matrices.symmetric_eigen(A)
    assert np.allclose(V.T @ V, np.eye(dim), atol=1e-13)
    assert np.allclose((V * w) @ V.T, A, rtol=0, atol=1e-12 * spectrum.max())
    # Each eigenvalue to a relative 1e-8, the smallest included: LAPACK, the reference,
    # is itself within about eps * max|w| / min|w| = 2e-9 of the smallest.
    assert np.allclose(np.sort(w), np.linalg.eigvalsh(A), rtol=1e-8, atol=0)
    # Elementwise operations only: the same bits for a copy in another memory layout.
    w2, V2 = matrices.symmetric_eigen(np.asfortranarray(A))
    assert np.array_equal(w, w2) and np.array_equal(V, V2)


def test_the_row_wise_forward_substitution_is_accurate_and_independent_of_the_layout() -> None:
    from kameleon.core.numerics import matrices

    rng = np.random.default_rng(5)
    L = np.tril(rng.standard_normal((7, 7))) + 4 * np.eye(7)
    rows = rng.standard_normal((30, 7)) * np.logspace(-3, 3, 7)
    u = matrices.solve_lower_rows(L, rows)
    assert np.allclose(u, np.linalg.solve(L, rows.T).T, rtol=1e-12, atol=0)
    # Each row as the vector substitution gives it, up to the order of its additions.
    assert np.allclose(u[3], matrices.solve_lower(L, rows[3]), rtol=1e-13, atol=0)
    again = matrices.solve_lower_rows(np.asfortranarray(L), np.asfortranarray(rows))
    assert np.array_equal(u, again)
