"""Convergence warnings and the stopping rule (core/diagnostics/findings.py), and sample() using them."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from kameleon.core.diagnostics import convergence
from kameleon.core.diagnostics.convergence import check
from kameleon.core.diagnostics.findings import CODES, Finding, SamplingWarning, StopRule
from kameleon.core.diagnostics.summary import chain_mean_z, summarize
from kameleon.core.running.inprocess import sample

NAMES = ["a", "b"]


def gaussian(x: np.ndarray) -> float:
    return -0.5 * float(x @ x)


def codes(found: list[Finding]) -> list[str]:
    return [f.code for f in found]


def iid(chains: int, draws: int, dim: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((chains, draws, dim))


# ------------------------------------------------------------------------- check()


def test_independent_draws_give_no_warning() -> None:
    # 4 x 1000 independent normal draws: ESS about 4000 (far over 400), R-hat within
    # about 0.002 of 1, no runs, chain means within a few MCSE of each other.
    assert check(iid(4, 1000), NAMES, [0.3] * 4) == []


def test_too_few_draws_is_the_only_warning() -> None:
    (found,) = check(iid(4, 3), NAMES, [0.0] * 4)
    assert (found.code, found.parameter, found.chain) == ("too_few_draws", None, None)
    assert (found.value, found.threshold) == (3.0, 4.0)
    assert check(iid(0, 10), NAMES) == []


def test_far_apart_chains_warn_with_rhat_and_ess() -> None:
    draws = iid(4, 1000) + np.array([0.0, 0.0, 0.0, 6.0])[:, None, None]
    found = check(draws, NAMES)
    assert codes(found) == ["rhat", "rhat", "ess_bulk", "ess_bulk", "ess_tail", "ess_tail"]
    rhat = found[0]
    assert rhat.parameter == "a" and rhat.chain is None
    assert rhat.value > 1.3 and rhat.threshold == 1.01  # ranks bound it: about 1.5
    assert found[2].threshold == 400.0 and found[2].value < 400
    assert "R-hat of a" in rhat.message
    assert rhat.as_dict() == {
        "code": "rhat",
        "parameter": "a",
        "chain": None,
        "value": rhat.value,
        "threshold": 1.01,
        "message": rhat.message,
    }


def test_acceptance_outside_bounds_warns_per_chain() -> None:
    found = check(iid(4, 1000), NAMES, [0.01, 0.3, None, 0.99])
    assert [(f.code, f.chain, f.value) for f in found] == [
        ("acceptance_low", 0, 0.01),
        ("acceptance_high", 3, 0.99),
    ]
    assert check(iid(4, 1000), NAMES, [0.05, 0.95, math.nan, 0.5]) == []  # bounds allowed


def test_a_chain_that_sat_still_is_stuck() -> None:
    draws = iid(4, 1000)
    draws[2, 400:700] = draws[2, 399]  # 301 identical draws: more than 225
    found = [f for f in check(draws, NAMES) if f.code == "stuck"]
    assert [(f.chain, f.value, f.threshold) for f in found] == [(2, 301.0, 225.0)]
    draws[2, 625:] = draws[2, 624] + 1.0  # two runs of 226 and 375
    assert [f.value for f in check(draws, NAMES) if f.code == "stuck"] == [375.0]
    draws = iid(4, 1000)
    draws[1, 100:324] = draws[1, 99]  # 225: at the threshold, not over it
    assert "stuck" not in codes(check(draws, NAMES))


def test_stuck_threshold_grows_with_the_log_of_the_draws() -> None:
    assert [convergence.stuck_threshold(n) for n in (1, 1000, 100_000)] == [90, 225, 315]
    # A chain accepting 5% goes that long without moving with probability under 1%.
    for n in (1000, 100_000):
        assert n * 0.95 ** convergence.stuck_threshold(n) < 0.01
    assert convergence.longest_run(np.zeros((0, 2))) == 0
    assert convergence.longest_run([[1.0, 2.0], [1.0, 2.0], [1.0, 3.0]]) == 2


def test_one_stray_chain_among_many_is_named_where_rhat_is_quiet() -> None:
    # 16 chains of 4000 independent draws, chain 5 shifted by 0.2 sd: R-hat is about
    # 1 + 0.2**2 / 32 = 1.001, but chain 5's mean is 0.2 / sqrt(1/4000 + 1/60000) = 12
    # MCSE from the others' (give or take 1).
    draws = iid(16, 4000, seed=1)
    draws[5, :, 1] += 0.2
    found = check(draws, NAMES)
    assert codes(found) == ["chain_mean"]
    (f,) = found
    assert (f.parameter, f.chain, f.threshold) == ("b", 5, 5.0)
    assert 8 < f.value < 16
    assert summarize(draws, NAMES)[1]["r_hat"] < 1.01


def test_chain_mean_z_is_about_standard_normal_for_agreeing_chains() -> None:
    # 8 chains of 2000 independent draws, 50 repetitions: 400 values of z whose sd is 1
    # up to the error of the estimated MCSEs (a few percent) and of 400 samples (4%).
    z = np.concatenate([chain_mean_z(iid(8, 2000, 1, seed)[:, :, 0]) for seed in range(50)])
    assert abs(z.mean()) < 0.2 and 0.85 < z.std() < 1.15
    assert np.abs(z).max() < 5
    assert np.isnan(chain_mean_z(np.zeros((1, 100)))).all()  # one chain
    assert np.isnan(chain_mean_z(np.zeros((3, 100)))).all()  # nothing to tell apart


def test_non_finite_draws_are_counted() -> None:
    draws = iid(4, 1000)
    draws[0, :3, 1] = np.inf
    found = check(draws, NAMES)
    assert [(f.code, f.parameter, f.value) for f in found] == [("nonfinite", "b", 3.0)]


def test_codes_are_reported_in_their_documented_order() -> None:
    draws = iid(4, 1000) + np.array([0.0, 0.0, 0.0, 6.0])[:, None, None]
    draws[1, 100:600] = draws[1, 99]
    draws[0, 0, 0] = np.nan
    found = codes(check(draws, NAMES, [0.0, 0.3, 0.3, 0.3]))
    assert found == sorted(found, key=CODES.index)
    assert set(found) == {"nonfinite", "rhat", "ess_bulk", "ess_tail", "acceptance_low", "stuck"}


# ----------------------------------------------------------------------- StopRule


def test_stop_rule_is_validated() -> None:
    assert StopRule.of({"rhat": 1.05}) == StopRule(1.05, 400.0, 1000)
    rule = StopRule(1.01, 100.0, 10)
    assert StopRule.of(rule) is rule
    for bad in (
        {"rhat": 1.0},
        {"rhat": math.inf},
        {"ess": 0},
        {"ess": math.nan},
        {"check_every": 0},
        {"check_every": 1.5},
        {"check_every": True},
        {"checkevery": 10},
    ):
        with pytest.raises(ValueError, match="stop rule"):
            StopRule.of(bad)


def test_stop_rule_needs_every_parameter_and_every_statistic() -> None:
    rule = StopRule(1.01, 400.0, 100)
    good = summarize(iid(4, 1000), NAMES)
    assert rule.met(good)
    assert not rule.met([])
    for key, value in (("r_hat", 1.02), ("ess_bulk", 300.0), ("ess_tail", math.nan)):
        bad = [good[0], {**good[1], key: value}]
        assert not rule.met(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ sample()


def test_sample_warns_on_a_bad_run() -> None:
    # Chains started 20 apart with steps of 0.01 on a unit Gaussian: they never meet.
    starts = [[-10.0, -10.0], [10.0, 10.0], [-10.0, 10.0], [10.0, -10.0]]
    options = {"adapt_scale": False, "scale": 0.01}
    with pytest.warns(SamplingWarning) as record:
        sample(gaussian, 2, algorithm="rwm", iterations=500, warmup=0, initial=starts,
               options=options, seed=1)  # fmt: skip
    found = [w.message.finding.code for w in record if isinstance(w.message, SamplingWarning)]
    assert {"rhat", "ess_bulk", "ess_tail"} <= set(found)


def test_sample_warns_on_a_chain_that_never_moves() -> None:
    # Everything but the origin is outside the support: the chains start there (a given
    # initial point is used exactly) and every proposal is rejected.
    def point(x: np.ndarray) -> float:
        return 0.0 if not x.any() else -math.inf

    with pytest.warns(SamplingWarning) as record:
        sample(point, 2, algorithm="rwm", chains=2, iterations=500, warmup=10,
               initial=np.zeros(2), seed=1)  # fmt: skip
    found = [(w.message.finding.code, w.message.finding.chain) for w in record]  # type: ignore[union-attr]
    assert found == [("acceptance_low", 0), ("acceptance_low", 1), ("stuck", 0), ("stuck", 1)]


def test_sample_warns_with_too_few_draws_and_can_be_told_not_to() -> None:
    with pytest.warns(SamplingWarning, match="too few"):
        sample(gaussian, 2, algorithm="rwm", chains=2, iterations=2, warmup=10, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sample(gaussian, 2, algorithm="rwm", chains=2, iterations=2, warmup=10, seed=1, warn=False)


@pytest.mark.slow
def test_sample_is_quiet_on_a_good_long_run() -> None:
    # AM on a 2-d standard normal, 4 chains of 10 000 draws after 1000 of warm-up: bulk
    # ESS about 4000, tail ESS about 5000, R-hat within 0.002 of 1 (seeds 0 to 2); the
    # thresholds (400 and 1.01) are far off.
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplingWarning)
        draws = sample(gaussian, 2, algorithm="am", iterations=10_000, warmup=1000, seed=0)
    assert draws.shape == (4, 10_000, 2)


def test_sample_stops_by_the_rule_on_an_easy_target() -> None:
    # AM on a 2-d standard normal, 4 chains: the rule (R-hat < 1.01, ESS > 400, checked
    # every 500 draws) is met after 1000 to 2000 draws per chain over seeds 0 to 3, far
    # from the 20 000 allowed.
    rule = {"rhat": 1.01, "ess": 400, "check_every": 500}
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplingWarning)  # the rule is stricter than these
        draws = sample(gaussian, 2, algorithm="am", iterations=20_000, warmup=500, seed=2,
                       stop=rule)  # fmt: skip
    assert draws.shape[1] % 500 == 0 and draws.shape[1] <= 5000
    assert StopRule.of(rule).met(summarize(draws, ["x0", "x1"]))
    shorter = draws[:, : draws.shape[1] - 500]
    assert not StopRule.of(rule).met(summarize(shorter, ["x0", "x1"]))  # not met earlier
    # The same chains as without the rule, cut where it stopped.
    full = sample(gaussian, 2, algorithm="am", iterations=draws.shape[1], warmup=500, seed=2)
    assert draws.tobytes() == full.tobytes()


def test_sample_runs_to_the_end_when_the_rule_cannot_be_met() -> None:
    rule = StopRule(rhat=1.01, ess=1e9, check_every=100)
    draws = sample(
        gaussian, 2, algorithm="rwm", iterations=350, warmup=50, seed=3, stop=rule, warn=False
    )
    assert draws.shape == (4, 350, 2)


def test_a_sampling_warning_pickles_with_its_finding_and_is_not_made_of_a_message() -> None:
    import pickle

    finding = Finding("rhat", "x0", None, 1.2, 1.01, "R-hat of x0 is 1.2")
    copy = pickle.loads(pickle.dumps(SamplingWarning(finding)))
    assert isinstance(copy, SamplingWarning) and copy.finding == finding
    assert str(copy) == finding.message
    with pytest.raises(TypeError, match="Finding"):
        SamplingWarning(finding.message)  # type: ignore[arg-type]
