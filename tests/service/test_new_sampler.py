"""A sampler is its file and one registry entry (CONTRIBUTING, "Add a sampler"): the toy
sampler of ``toy_sampler.py`` runs through the service on every store, with its options
validated, its draws the in-process ones bit for bit, and the right moments."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.running.inprocess import sample
from tests.service import toy_sampler
from tests.service.conftest import MakeClient


@pytest.fixture
def registered() -> Iterator[str]:
    """The toy sampler in the registry: the one line a new sampler adds."""
    SAMPLERS[toy_sampler.NAME] = toy_sampler.SAMPLER
    try:
        yield toy_sampler.NAME
    finally:
        del SAMPLERS[toy_sampler.NAME]


def test_a_registered_sampler_runs_through_the_service(
    registered: str, make_client: MakeClient
) -> None:
    client = make_client()
    body = {"algorithm": registered, "dim": 2, "chains": 2, "seed": 11, "warmup": 50}
    body |= {"max_iterations": 2050, "options": {"scale": 1.5}}
    created = client.post("/v1/sessions", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["options"] == {"scale": 1.5}
    sid = created.json()["id"]
    proposals = client.post(f"/v1/sessions/{sid}/ask", json={"max": 2}).json()["proposals"]
    while proposals:
        results = [
            {"id": p["id"], "log_density": -0.5 * float(np.sum(np.square(p["x"])))}
            for p in proposals
        ]
        proposals = client.post(
            f"/v1/sessions/{sid}/step", json={"results": results, "max": 2}
        ).json()["proposals"]
    page = client.get(f"/v1/sessions/{sid}/draws").json()
    draws = np.array([c["draws"] for c in page["chains"]])
    assert draws.shape == (2, 2000, 2)
    # In process, the same seed and values: the same draws.
    alone = sample(  # the post-warm-up draws, (chains, draws, dim)
        lambda x: -0.5 * float(np.sum(np.square(x))),
        dim=2,
        algorithm=registered,
        chains=2,
        iterations=2000,
        warmup=50,
        seed=11,
        options={"scale": 1.5},
        warn=False,
    )
    assert alone.tobytes() == draws.tobytes()
    # A standard normal: 4000 draws of an independence sampler whose acceptance is high
    # have an ESS in the thousands, so the mean is within 0.1 and the variance within
    # 0.15 of the truth by a wide margin (over 4 standard errors).
    assert np.all(np.abs(draws.reshape(-1, 2).mean(axis=0)) < 0.1)
    assert np.all(np.abs(draws.reshape(-1, 2).var(axis=0) - 1) < 0.15)
    # Its options are checked like any sampler's.
    bad = client.post("/v1/sessions", json=body | {"options": {"scale": -1.0}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "options.scale"


def test_an_unregistered_name_is_refused_with_the_registered_ones(make_client: MakeClient) -> None:
    client = make_client()
    response = client.post("/v1/sessions", json={"algorithm": toy_sampler.NAME, "dim": 2})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "algorithm"
    assert "'am'" in response.json()["detail"]
