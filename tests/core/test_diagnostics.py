"""Tests of core.diagnostics.summary: against ArviZ, against analytic values, and on edge cases."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.signal
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kameleon.core.diagnostics import summary as diagnostics
from kameleon.core.interface.chain import FloatArray

with warnings.catch_warnings():
    # ArviZ 0.23 announces its 1.0 refactor with a FutureWarning on import.
    warnings.simplefilter("ignore", FutureWarning)
    import arviz

# No diagnostic may warn, whatever the input.
pytestmark = pytest.mark.filterwarnings("error")

# ArviZ's functions are unannotated.
AZ: Any = arviz

FUNCTIONS: dict[str, Callable[[FloatArray], float]] = {
    "ess_bulk": diagnostics.ess_bulk,
    "ess_tail": diagnostics.ess_tail,
    "r_hat": diagnostics.rhat,
    "mcse_mean": diagnostics.mcse_mean,
}


def statistics(summary: diagnostics.ParameterSummary) -> dict[str, float]:
    """The numbers in a summary, by name."""
    return {
        "mean": summary["mean"],
        "sd": summary["sd"],
        "mcse_mean": summary["mcse_mean"],
        "ess_bulk": summary["ess_bulk"],
        "ess_tail": summary["ess_tail"],
        "r_hat": summary["r_hat"],
    }


def ar1(rng: np.random.Generator, phi: float, chains: int, draws: int) -> FloatArray:
    """Stationary Gaussian AR(1) chains ``x_t = phi x_{t-1} + e_t``, ``e_t ~ N(0, 1)``."""
    noise = rng.normal(size=(chains, draws))
    noise[:, 0] /= math.sqrt(1 - phi**2)
    result: FloatArray = scipy.signal.lfilter([1.0], [1.0, -phi], noise, axis=1)
    return result


def reference_data() -> dict[str, FloatArray]:
    rng = np.random.default_rng(20210101)
    return {
        "iid normal": rng.normal(size=(4, 1000)),
        "AR(1), phi 0.95": ar1(rng, 0.95, 4, 2000),
        "different means": rng.normal(size=(4, 500)) + np.array([[0.0], [0.0], [0.0], [2.0]]),
        "different scales": rng.normal(size=(4, 500)) * np.array([[1.0], [1.0], [1.0], [3.0]]),
        "Cauchy": rng.standard_cauchy(size=(4, 1000)),
        "odd length": rng.normal(size=(3, 1001)),
        "ties": np.round(rng.normal(size=(4, 300))),
        "one chain": ar1(rng, 0.5, 1, 1000),
        "short, 4 draws": rng.normal(size=(3, 4)),
        "short, 9 draws": rng.normal(size=(3, 9)),
        "short, 12 draws": rng.normal(size=(3, 12)),
        # Geyer's sequence runs to its end, where the last even lag is negative.
        "short, negative last lag": np.random.default_rng(1).normal(size=(3, 12)),
    }


REFERENCE_DATA = reference_data()


def arviz_values(draws: FloatArray) -> dict[str, float]:
    return {
        "ess_bulk": float(AZ.ess(draws, method="bulk")),
        "ess_tail": float(AZ.ess(draws, method="tail")),
        "r_hat": float(AZ.rhat(draws, method="rank")),
        "mcse_mean": float(AZ.mcse(draws, method="mean")),
    }


@pytest.mark.parametrize("label", list(REFERENCE_DATA))
def test_matches_arviz(label: str) -> None:
    draws = REFERENCE_DATA[label]
    expected = arviz_values(draws)
    if draws.shape[0] == 1:
        # ArviZ 0.23 needs two chains for R-hat; this module splits the one chain.
        assert math.isnan(expected.pop("r_hat"))
    for name, value in expected.items():
        # Same algorithm, so the only differences are rounding in the FFT and in the
        # order of sums, about 1e-15 relative.
        assert FUNCTIONS[name](draws) == pytest.approx(value, rel=1e-9), name


def test_reference_data_exercise_the_diagnostics() -> None:
    # The ArviZ comparison is only as good as its data: it must include a run that
    # R-hat flags in the bulk, one it flags in the tails only, and strong autocorrelation.
    means = REFERENCE_DATA["different means"]
    scales = REFERENCE_DATA["different scales"]
    assert diagnostics.rhat(means) > 1.2
    assert diagnostics.rhat(scales) > 1.1
    assert AZ.rhat(scales, method="z_scale") < 1.01 < AZ.rhat(scales, method="folded")
    assert diagnostics.ess_bulk(REFERENCE_DATA["AR(1), phi 0.95"]) < 0.05 * 8000


def test_iid_draws() -> None:
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(4, 2500))
    n = draws.size
    # Over 200 seeds the bulk and tail ESS of iid draws were n * (0.99 +- 0.03) and
    # n * (0.97 +- 0.03); 15% is 5 standard deviations.
    assert diagnostics.ess_bulk(draws) == pytest.approx(n, rel=0.15)
    assert diagnostics.ess_tail(draws) == pytest.approx(n, rel=0.15)
    # sd / sqrt(n), within 5 standard deviations of its relative spread (0.016).
    expected_mcse = np.std(draws, ddof=1) / math.sqrt(n)
    assert diagnostics.mcse_mean(draws) == pytest.approx(expected_mcse, rel=0.08)
    # R-hat - 1 is about (F - 1) / (2 * 1250) with F ~ F(7, 9992); over 200 seeds its
    # largest value was 0.0011.
    assert abs(diagnostics.rhat(draws) - 1) < 0.005


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_ar1_draws(phi: float) -> None:
    rng = np.random.default_rng(2)
    draws = ar1(rng, phi, 4, 20000)
    # The integrated autocorrelation time of AR(1) is (1 + phi) / (1 - phi).
    expected_ess = draws.size * (1 - phi) / (1 + phi)
    # For phi = 0.9 the ESS over 200 seeds was expected_ess * (1.00 +- 0.05), and its
    # MCSE sd / sqrt(expected_ess) * (1.00 +- 0.03): 20% and 12% are 4 standard
    # deviations (phi = 0.5 is less variable).
    assert diagnostics.ess_bulk(draws) == pytest.approx(expected_ess, rel=0.2)
    stationary_sd = 1 / math.sqrt(1 - phi**2)
    expected_mcse = stationary_sd / math.sqrt(expected_ess)
    assert diagnostics.mcse_mean(draws) == pytest.approx(expected_mcse, rel=0.12)


def test_rhat_of_one_chain_compares_its_halves() -> None:
    rng = np.random.default_rng(3)
    stationary = rng.normal(size=(1, 2000))
    drifting = stationary + np.concatenate((np.zeros(1000), np.full(1000, 1.0)))[None, :]
    # For iid draws R-hat - 1 is about (F - 1) / 2000 with F ~ F(1, 1998): it exceeds
    # 0.01 with probability below 1e-5. With a shift of one sd between the halves, their
    # normal scores differ by about 0.9 in mean with a variance of about 0.8 each, so
    # R-hat is about sqrt(1 + 0.9**2 / 2 / 0.8) = 1.23.
    assert abs(diagnostics.rhat(stationary) - 1) < 0.01
    assert diagnostics.rhat(drifting) > 1.1


def test_rank_based_ess_is_invariant_under_monotone_transforms() -> None:
    draws = REFERENCE_DATA["AR(1), phi 0.95"]
    # exp is strictly increasing, so the ranks and quantile indicators do not change.
    assert diagnostics.ess_bulk(np.exp(draws)) == diagnostics.ess_bulk(draws)
    assert diagnostics.ess_tail(np.exp(draws)) == diagnostics.ess_tail(draws)


def test_mcse_scales_with_the_draws() -> None:
    draws = REFERENCE_DATA["AR(1), phi 0.95"]
    scaled = diagnostics.mcse_mean(-3.0 * draws + 7.0)
    assert scaled == pytest.approx(3.0 * diagnostics.mcse_mean(draws), rel=1e-10)


@pytest.mark.parametrize("label", list(REFERENCE_DATA))
def test_ess_of_the_mean_matches_arviz(label: str) -> None:
    draws = REFERENCE_DATA[label]
    expected = float(AZ.ess(draws, method="mean"))
    # The same rounding-only tolerance as the other ArviZ comparisons.
    assert diagnostics.ess_mean(draws) == pytest.approx(expected, rel=1e-9, nan_ok=True)


def test_per_parameter_applies_a_statistic_to_every_trailing_index() -> None:
    draws = np.random.default_rng(8).normal(size=(4, 200, 2, 3))
    values = diagnostics.per_parameter(diagnostics.ess_mean, draws)
    assert values.shape == (2, 3)
    assert values[1, 2] == diagnostics.ess_mean(draws[:, :, 1, 2])
    with pytest.raises(ValueError):
        diagnostics.per_parameter(diagnostics.ess_mean, np.zeros(5))


def test_summarize_collects_the_diagnostics() -> None:
    rng = np.random.default_rng(4)
    draws = np.stack([ar1(rng, 0.7, 3, 500), rng.standard_cauchy(size=(3, 500))], axis=-1)
    summaries = diagnostics.summarize(draws, ["a", "b"])
    assert len(summaries) == 2
    for i, (name, summary) in enumerate(zip(["a", "b"], summaries, strict=True)):
        one = draws[:, :, i]
        assert summary == {
            "name": name,
            "mean": pytest.approx(np.mean(one), rel=1e-12),
            "sd": pytest.approx(np.std(one, ddof=1), rel=1e-12),
            "mcse_mean": diagnostics.mcse_mean(one),
            "ess_bulk": diagnostics.ess_bulk(one),
            "ess_tail": diagnostics.ess_tail(one),
            "r_hat": diagnostics.rhat(one),
        }
        assert all(type(value) is float for value in statistics(summary).values())


@pytest.mark.parametrize("draws_per_chain", [0, 1, 2, 3])
def test_too_short_chains_give_nan(draws_per_chain: int) -> None:
    draws = np.arange(2.0 * draws_per_chain).reshape(2, draws_per_chain)
    for function in FUNCTIONS.values():
        assert math.isnan(function(draws))
    (summary,) = diagnostics.summarize(draws[:, :, None], ["x"])
    assert math.isnan(summary["mean"]) == (draws.size == 0)
    assert math.isnan(summary["sd"]) == (draws.size < 2)
    assert all(math.isnan(statistics(summary)[key]) for key in FUNCTIONS)


def test_no_chains_give_nan() -> None:
    (summary,) = diagnostics.summarize(np.empty((0, 100, 1)), ["x"])
    assert all(math.isnan(value) for value in statistics(summary).values())


def test_minimum_length_is_defined() -> None:
    draws = np.random.default_rng(5).normal(size=(2, diagnostics.MIN_DRAWS))
    assert all(math.isfinite(function(draws)) for function in FUNCTIONS.values())


def test_constant_draws() -> None:
    (summary,) = diagnostics.summarize(np.full((4, 100, 1), 2.5), ["x"])
    assert summary["mean"] == 2.5
    assert summary["sd"] == 0.0
    assert all(math.isnan(statistics(summary)[key]) for key in FUNCTIONS)
    assert all(math.isnan(function(np.full((4, 100), 2.5))) for function in FUNCTIONS.values())


def test_chains_stuck_at_different_points() -> None:
    draws = np.repeat([[0.0], [1.0], [2.0]], 50, axis=1)
    assert diagnostics.rhat(draws) == math.inf
    # rho is 1 at every lag: each of the (25 - 3) // 2 = 11 pair sums is 2, so the
    # autocorrelation time is -1 + 2 * 2 * 11 + 1 = 44 for the 6 * 25 split draws.
    assert diagnostics.ess_bulk(draws) == pytest.approx(150 / 44, rel=1e-12)


def test_two_valued_draws() -> None:
    # Folded around their median, draws taking two values equally often are constant:
    # only the bulk R-hat is defined, and it is reported. Only one tail indicator is
    # non-constant, and its ESS is reported.
    rng = np.random.default_rng(6)
    draws = rng.permutation(np.repeat([0.0, 1.0], 200)).reshape(4, 100)
    assert diagnostics.rhat(draws) == pytest.approx(float(AZ.rhat(draws, method="z_scale")))
    assert diagnostics.ess_tail(draws) == pytest.approx(
        float(AZ.ess(draws, method="quantile", prob=0.05))
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_draws_give_nan(bad: float) -> None:
    draws = np.random.default_rng(7).normal(size=(4, 100))
    draws[2, 17] = bad
    for function in FUNCTIONS.values():
        assert math.isnan(function(draws))
    (summary,) = diagnostics.summarize(draws[:, :, None], ["x"])
    assert all(math.isnan(value) for value in statistics(summary).values())


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(0, 3), st.integers(0, 12)),
        elements=st.floats(allow_nan=True, allow_infinity=True),
    )
)
def test_any_input_gives_floats_without_warning(draws: FloatArray) -> None:
    size = draws.shape[0] * (draws.shape[1] // 2) * 2
    for name, function in FUNCTIONS.items():
        value = function(draws)
        assert type(value) is float
        if name.startswith("ess") and not math.isnan(value):
            assert 0 < value <= size * math.log10(size) * (1 + 1e-12)
        if not math.isnan(value):
            assert value >= 0
    (summary,) = diagnostics.summarize(draws[:, :, None], ["x"])
    assert all(type(value) is float for value in statistics(summary).values())


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="chains, draws"):
        diagnostics.ess_bulk(np.zeros(10))
    with pytest.raises(ValueError, match="chains, draws, dim"):
        diagnostics.summarize(np.zeros((2, 10)), ["x"])
    with pytest.raises(ValueError, match="1 names for 2 parameters"):
        diagnostics.summarize(np.zeros((2, 10, 2)), ["x"])
