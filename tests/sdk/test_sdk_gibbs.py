"""``kameleon.sample`` of ``gibbs`` with a conditional block drawn by a Python function:
in process and through a service, the same draws bit for bit, and the right moments."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import kameleon
from kameleon.core.diagnostics.summary import ess_mean, per_parameter

# x0 ~ N(0, 1); (x1, x2) | x0 ~ N((x0, -x0), 0.5 I): a conjugate normal model whose
# block (x1, x2) has a closed-form full conditional.
MEAN = np.zeros(3)
SD = np.array([1.0, np.sqrt(1.5), np.sqrt(1.5)])


def log_density(x: np.ndarray) -> float:
    r = x[1:] - np.array([x[0], -x[0]])
    return float(-0.5 * x[0] ** 2 - float(r @ r))


def draw_block(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([x[0], -x[0]]) + np.sqrt(0.5) * rng.standard_normal(2)


BLOCKS = [{"indices": [0]}, {"indices": [1, 2], "conditional": True}]


def _run(**more: Any) -> kameleon.Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kameleon.sample(
            log_density,
            3,
            algorithm="gibbs",
            chains=2,
            warmup=100,
            iterations=400,
            seed=5,
            progress=False,
            blocks=BLOCKS,
            conditionals={1: draw_block},
            **more,
        )


def test_in_process_and_through_a_service_give_the_same_draws(server: str) -> None:
    local = _run()
    assert local.draws.shape == (2, 400, 3)
    served = _run(url=server)
    assert served.draws.tobytes() == local.draws.tobytes()
    assert served.log_density.tobytes() == local.log_density.tobytes()


@pytest.mark.slow
def test_the_moments_are_right() -> None:
    """Means within 4 Monte Carlo standard errors of 0 (a false alarm about 1 in 16 000
    per comparison), with the standard errors from the chains' split-chain ESS."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = kameleon.sample(
            log_density,
            3,
            algorithm="gibbs",
            chains=4,
            warmup=300,
            iterations=3000,
            seed=6,
            progress=False,
            blocks=BLOCKS,
            conditionals={1: draw_block},
        )
    draws = result.draws
    ess = per_parameter(ess_mean, draws)
    mcse = SD / np.sqrt(ess)
    mean = draws.mean(axis=(0, 1))
    print({"mean": mean.tolist(), "mcse": mcse.tolist(), "sd": draws.std(axis=(0, 1)).tolist()})
    assert np.all(np.abs(mean - MEAN) < 4 * mcse)
    assert np.allclose(draws.std(axis=(0, 1)), SD, rtol=0.1)  # 10%: ESS in the thousands


def test_a_conditional_block_needs_its_function() -> None:
    with pytest.raises(ValueError, match="block 1 is conditional"):
        kameleon.sample(
            log_density, 3, algorithm="gibbs", iterations=10, progress=False, blocks=BLOCKS
        )
