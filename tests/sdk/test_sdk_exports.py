"""The result's exports: GetDist text chains, ArviZ, GetDist samples, CSV; and a clear
error when an optional package is missing."""

from __future__ import annotations

import csv
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import kameleon

NAMES = ["a", "b", "c"]


def gaussian(x: np.ndarray) -> float:
    return -0.5 * float(x @ x)


@pytest.fixture(scope="module")
def result() -> kameleon.Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kameleon.SamplingWarning)
        return kameleon.sample(
            gaussian,
            dim=3,
            chains=3,
            warmup=100,
            iterations=150,
            seed=4,
            progress=False,
            param_names=NAMES,
        )


def test_getdist_text_chains_parse_back_with_the_right_columns(
    result: kameleon.Result, tmp_path: Path
) -> None:
    root = tmp_path / "out" / "gauss"
    written = result.save_getdist(root)
    chains = [tmp_path / "out" / f"gauss_{k}.txt" for k in (1, 2, 3)]
    assert written == [*chains, tmp_path / "out" / "gauss.paramnames"]
    for c, path in enumerate(chains):
        table = np.loadtxt(path)
        assert table.shape == (150, 2 + 3)
        np.testing.assert_array_equal(table[:, 0], 1.0)  # weights
        np.testing.assert_array_equal(table[:, 1], -result.log_density[c])  # -log posterior
        np.testing.assert_array_equal(table[:, 2:], result.draws[c])  # %.17g: exact
        assert path.read_text().startswith("# weight  minuslogpost  a  b  c\n")
    names = (tmp_path / "out" / "gauss.paramnames").read_text().splitlines()
    assert [line.split("\t")[0] for line in names] == NAMES


def test_getdist_reads_the_text_chains_and_to_getdist_agrees(
    result: kameleon.Result, tmp_path: Path
) -> None:
    import getdist  # the test extra installs it

    result.save_getdist(tmp_path / "gauss")
    loaded = getdist.loadMCSamples(str(tmp_path / "gauss"), settings={"ignore_rows": 0})
    direct = result.to_getdist()
    mean = result.draws.reshape(-1, 3).mean(axis=0)
    np.testing.assert_allclose(loaded.getMeans()[:3], mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(direct.getMeans()[:3], mean, rtol=1e-12, atol=1e-12)
    assert [p.name for p in direct.paramNames.names[:3]] == NAMES


def test_importance_samples_go_to_getdist_with_their_weights(tmp_path: Path) -> None:
    # Importance samples keep their weights in GetDist (text chains and MCSamples): the
    # weighted means GetDist computes are the result's own weighted means.
    import getdist

    result = kameleon.sample(
        gaussian, dim=3, algorithm="importance", chains=4, warmup=400, iterations=100,
        seed=4, progress=False, param_names=NAMES,
    )  # fmt: skip
    assert result.log_weights is not None
    w = result.weights.reshape(-1)
    mean = w @ result.draws.reshape(-1, 3)
    result.save_getdist(tmp_path / "is")
    table = np.loadtxt(tmp_path / "is_1.txt")
    np.testing.assert_allclose(table[:, 0], result.weights[0] / result.weights.max(), rtol=1e-15)
    loaded = getdist.loadMCSamples(str(tmp_path / "is"), settings={"ignore_rows": 0})
    np.testing.assert_allclose(loaded.getMeans()[:3], mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.to_getdist().getMeans()[:3], mean, rtol=1e-12, atol=1e-12)
    assert not np.allclose(mean, result.draws.reshape(-1, 3).mean(axis=0), rtol=0, atol=1e-6)
    stats = result.to_arviz().sample_stats
    np.testing.assert_array_equal(stats["mixture_log_weight"].values, result.log_weights)
    np.testing.assert_array_equal(stats["log_weight"].values, result.sample_stats["log_weight"])


def test_to_arviz(result: kameleon.Result) -> None:
    import arviz as az  # the test extra installs it

    idata = result.to_arviz()
    posterior = idata.posterior
    assert list(posterior.data_vars) == NAMES
    assert posterior.sizes["chain"] == 3 and posterior.sizes["draw"] == 150
    np.testing.assert_array_equal(posterior["b"].values, result.draws[:, :, 1])
    np.testing.assert_array_equal(idata.sample_stats["lp"].values, result.log_density)
    # ArviZ's R-hat and ours are the same statistic (rank-normalised split R-hat).
    rhat = az.rhat(idata)
    np.testing.assert_allclose([float(rhat[n]) for n in NAMES], result.r_hat, rtol=1e-6)


def test_a_missing_optional_package_says_which_extra(
    result: kameleon.Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "arviz", None)  # import arviz now fails
    monkeypatch.setitem(sys.modules, "getdist", None)
    with pytest.raises(ImportError, match=r"kameleon\[arviz\]"):
        result.to_arviz()
    with pytest.raises(ImportError, match=r"kameleon\[getdist\]"):
        result.to_getdist()


def test_to_csv(result: kameleon.Result, tmp_path: Path) -> None:
    path = result.to_csv(tmp_path / "draws.csv")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["chain", "draw", "log_density", *NAMES]
    assert len(rows) == 1 + 3 * 150
    body = np.array(rows[1:], dtype=float)
    np.testing.assert_array_equal(body[:, 0], np.repeat([0, 1, 2], 150))
    np.testing.assert_array_equal(body[:, 2], result.log_density.ravel())
    np.testing.assert_array_equal(body[:, 3:], result.draws.reshape(-1, 3))


def test_summary_and_repr(result: kameleon.Result) -> None:
    text = result.summary()
    assert text.splitlines()[0].split()[:3] == ["parameter", "mean", "sd"]
    assert [line.split()[0] for line in text.splitlines()[1:4]] == NAMES
    assert "chains=3" in repr(result) and "seed=4" in repr(result)
