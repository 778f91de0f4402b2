"""Importance sampling (core.samplers.importance, core.populations.evidence, core.diagnostics.assess): the
evidence of targets whose normalising constant is known, with an error bar that covers
it; every mode of a separated mixture with its weight; warnings where the weights say
the estimates are unreliable; the per-draw log weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.populations.evidence import evidence, pareto_k
from kameleon.core.running.inprocess import assess_results, sample_chains
from kameleon.core.samplers import importance

SAMPLER = SAMPLERS["importance"]


def _gaussian(d: int, seed: int) -> tuple[object, float, np.ndarray, np.ndarray]:
    """An unnormalised correlated Gaussian, its log normalising constant, mean, sds."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((d, d))
    cov = a @ a.T / d + 0.1 * np.eye(d)
    precision = np.linalg.inv(cov)
    mean = rng.normal(0, 1, d)

    def f(x: np.ndarray) -> float:
        r = x - mean
        return -0.5 * float(r @ precision @ r)

    log_z = 0.5 * d * math.log(2 * math.pi) + 0.5 * float(np.linalg.slogdet(cov)[1])
    return f, log_z, mean, np.sqrt(np.diag(cov))


def _run(f: object, d: int, *, chains: int, warmup: int, iterations: int, seed: int) -> object:
    results = sample_chains(
        f, d, algorithm="importance", chains=chains, warmup=warmup, iterations=iterations,
        seed=seed, warn=False,
    )  # fmt: skip
    params = SAMPLER.make_params(d, {}, warmup=warmup)
    return assess_results(SAMPLER, params, results, [f"x{i}" for i in range(d)], warmup)


@pytest.mark.slow
def test_the_evidence_of_a_correlated_gaussian_in_ten_dimensions() -> None:
    # A 10-d Gaussian with correlations, condition number about 100. With 4000 warm-up
    # transitions am learns the covariance well enough that the weights are tame
    # (Pareto k about 0, ESS about half the draws, measured over seeds 1-3); the log
    # evidence must be within 4 of its own standard errors plus 0.02 (the delta
    # method's error) of the truth, and the standard error under 0.05.
    f, log_z, mean, sd = _gaussian(10, 0)
    a = _run(f, 10, chains=8, warmup=4000, iterations=1000, seed=1)
    ev = a.evidence
    assert ev is not None and ev.draws == 8000
    assert abs(ev.log_evidence - log_z) < 4 * ev.standard_error + 0.02, (ev, log_z)
    assert ev.standard_error < 0.05 and ev.pareto_k < 0.5 and ev.ess > 2000, ev
    assert a.findings == []
    means = np.array([p["mean"] for p in a.summaries])
    mcse = np.array([p["mcse_mean"] for p in a.summaries])
    assert np.all(np.abs(means - mean) < 4 * mcse + 0.01 * sd), (means - mean) / mcse


def test_too_short_a_warm_up_in_ten_dimensions_says_so() -> None:
    # The same target after 300 warm-up transitions: the proposals are too narrow, the
    # weights heavy-tailed. A confident answer here would be wrong; the weights warn.
    f, _, _, _ = _gaussian(10, 0)
    a = _run(f, 10, chains=4, warmup=300, iterations=500, seed=2)
    assert {w.code for w in a.findings} & {"pareto_k", "importance_ess"}, a.evidence


@pytest.mark.slow
def test_every_mode_of_a_separated_mixture_with_its_weight() -> None:
    # 0.3 N((-5, -5), I) + 0.7 N((5, 5), I) in 2-d, modes 14 sd apart: no chain of am
    # crosses, but chains started apart find both, and the draws weighed against every
    # chain's proposal give each mode its weight. Z = 2 pi exactly. Tolerances: 4
    # standard errors of the evidence; the mode weight within 0.03 (its Monte Carlo
    # error is about sqrt(0.21 / ESS) < 0.01).
    def f(x: np.ndarray) -> float:
        a = math.log(0.3) - 0.5 * float(np.sum((x + 5) ** 2))
        b = math.log(0.7) - 0.5 * float(np.sum((x - 5) ** 2))
        return max(a, b) + math.log1p(math.exp(-abs(a - b)))

    results = sample_chains(
        f, 2, algorithm="importance", chains=8, warmup=1000, iterations=1000, seed=3,
        initial_radius=8.0, warn=False,
    )  # fmt: skip
    params = SAMPLER.make_params(2, {}, warmup=1000)
    a = assess_results(SAMPLER, params, results, ["a", "b"], 1000)
    assert a.evidence is not None and a.log_weights is not None
    ev = a.evidence
    assert abs(ev.log_evidence - math.log(2 * math.pi)) < 4 * ev.standard_error, ev
    draws = np.stack([r.draws[1000:] for r in results]).reshape(-1, 2)
    w = np.exp(a.log_weights.ravel() - a.log_weights.max())
    upper = float(w[draws[:, 0] > 0].sum() / w.sum())
    assert abs(upper - 0.7) < 0.03, upper
    assert a.findings == [], a.findings


def test_the_error_bar_covers_the_evidence_across_seeds() -> None:
    # 20 runs on a 2-d Gaussian: the truth within 2 standard errors in at least 15 of
    # them (95 % each if the error bar is right: fewer than 15 of 20 has probability
    # under 0.3 %).
    f, log_z, _, _ = _gaussian(2, 4)
    covered = 0
    for seed in range(20):
        a = _run(f, 2, chains=4, warmup=400, iterations=200, seed=seed)
        ev = a.evidence
        assert ev is not None
        covered += abs(ev.log_evidence - log_z) < 2 * ev.standard_error
    assert covered >= 15, covered


def test_each_draw_carries_its_log_weight_against_its_chains_proposal() -> None:
    f, _, _, _ = _gaussian(3, 5)
    params = SAMPLER.make_params(3, {"proposal": "gaussian"}, warmup=200)
    results = sample_chains(
        f, 3, algorithm="importance", chains=2, warmup=200, iterations=50, seed=6,
        options={"proposal": "gaussian"}, warn=False,
    )  # fmt: skip
    for r in results:
        assert r.stat_names == ("log_weight",)
        assert np.all(np.isnan(r.stats[:200, 0]))  # warm-up: am's transitions
        for x, lp, lw in zip(r.draws[200:], r.logdensity[200:], r.stats[200:, 0], strict=True):
            expected = lp - importance.log_proposal(r.state, params, x)
            assert lw == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # Every draw after warm-up is new: nothing is rejected, nothing repeats.
    post = results[0].draws[200:]
    assert len({tuple(x) for x in post}) == len(post)


def test_a_zero_density_draw_has_zero_weight() -> None:
    # The positive half-line: draws below 0 are told -inf and weigh nothing.
    def f(x: np.ndarray) -> float:
        return -float(x[0]) if x[0] > 0 else -math.inf

    a = _run(f, 1, chains=4, warmup=500, iterations=500, seed=7)
    assert a.log_weights is not None and np.any(a.log_weights == -math.inf)
    ev = a.evidence
    assert ev is not None and abs(ev.log_evidence - 0.0) < 4 * ev.standard_error + 0.02, ev


def test_a_stopping_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="no R-hat"):
        sample_chains(lambda x: 0.0, 1, algorithm="importance", stop={"rhat": 1.01})


@pytest.mark.parametrize(
    ("options", "name"),
    [({"dof": 0}, "dof"), ({"inflation": 0.5}, "inflation"), ({"initial_scale": -1}, "")],
)
def test_bad_options_are_refused(options: dict[str, float], name: str) -> None:
    from kameleon.core.interface.sampler import OptionError

    with pytest.raises(OptionError):
        SAMPLER.make_params(2, options, warmup=10)


def test_pareto_k_finds_the_tail_of_pareto_weights() -> None:
    # Weights U^-xi have a Pareto tail of shape xi. Tolerance: the estimate's sd at
    # 4000 weights is about 0.1 (measured over 20 draws per shape), 0.25 is 2.5 of it.
    rng = np.random.default_rng(0)
    for xi in (0.2, 0.5, 1.0):
        k = pareto_k(-xi * np.log(rng.random(4000)))
        assert abs(k - xi) < 0.25, (xi, k)
    assert math.isnan(pareto_k(np.zeros(10)))


def test_evidence_of_known_weights() -> None:
    # Weights 1, 2, 3, 4: mean 2.5, Kish ESS 100/30.
    ev = evidence(np.log([1.0, 2.0, 3.0, 4.0]))
    assert ev.log_evidence == pytest.approx(math.log(2.5))
    assert ev.ess == pytest.approx(100 / 30)
    assert ev.standard_error == pytest.approx(math.sqrt(np.var([1, 2, 3, 4], ddof=1) / 4) / 2.5)
    zero = evidence(np.full(3, -math.inf))
    assert zero.log_evidence == -math.inf and zero.ess == 0.0
    with pytest.raises(ValueError):
        evidence(np.array([0.0, math.nan]))


def test_modes_found_by_one_chain_alone_warn() -> None:
    # Good and Turing: the share of chains that found a mode alone estimates the mass
    # of modes that none found.
    from kameleon.core.diagnostics.assess import mode_findings

    assert mode_findings([[0, 1, 2, 3]], 4) == []
    assert mode_findings([[0, 1], [2, 3]], 4) == []
    (found,) = mode_findings([[0], [1], [2, 3]], 4)
    assert found.code == "unseen_modes" and found.value == 0.5


@pytest.mark.slow
def test_the_eggbox_says_that_it_missed_modes() -> None:
    # dynesty's eggbox: 18 modes on (0, 10 pi)^2, each narrow. 16 chains find some of
    # them, each alone: the evidence misses the others (about 0.5 low, measured), and
    # the run must say so rather than report a tight error bar.
    def f(x: np.ndarray) -> float:
        if not (np.all(x > 0) and np.all(x < 10 * math.pi)):
            return -math.inf
        return float((2.0 + math.cos(x[0] / 2) * math.cos(x[1] / 2)) ** 5)

    starts = np.random.default_rng(1).uniform(0, 10 * math.pi, size=(16, 2))
    results = sample_chains(
        f, 2, algorithm="importance", chains=16, warmup=1000, iterations=200, seed=1,
        initial=starts, warn=False,
    )  # fmt: skip
    params = SAMPLER.make_params(2, {}, warmup=1000)
    a = assess_results(SAMPLER, params, results, ["x", "y"], 1000)
    assert "unseen_modes" in {f.code for f in a.findings}, a.findings


def test_a_draw_beyond_every_proposal_weighs_the_most_not_infinitely() -> None:
    # A draw so far in the tails that every proposal's density underflows: its weight is
    # the largest finite one, and the assessment warns instead of failing.
    from kameleon.core.diagnostics.assess import assess

    f, _, _, _ = _gaussian(2, 8)
    results = sample_chains(
        f, 2, algorithm="importance", chains=2, warmup=200, iterations=20, seed=9, warn=False,
        options={"proposal": "gaussian"},
    )  # fmt: skip
    params = SAMPLER.make_params(2, {"proposal": "gaussian"}, warmup=200)
    states = [r.state for r in results]
    draws = np.stack([r.draws[200:] for r in results])
    draws[0, 0] = [1e200, -1e200]
    log_density = np.stack([r.logdensity[200:] for r in results])
    log_density[0, 0] = -5.0
    lw = importance.mixture_log_weights(states, params, draws.reshape(-1, 2), log_density.ravel())
    assert np.all(np.isfinite(lw)) and lw[0] == lw.max()
    a = assess(
        SAMPLER, params, draws, ["a", "b"], acceptance=None, log_density=log_density,
        stats={}, states=states,
    )  # fmt: skip
    assert a.evidence is not None and math.isfinite(a.evidence.log_evidence)
    assert "importance_ess" in {f.code for f in a.findings}


def test_the_weights_need_a_hundred_effective_draws_per_chain() -> None:
    """The bar of a Markov chain's ESS: 100 effective draws per chain, so 135 is enough
    for one proposal and not for four."""
    from kameleon.core.diagnostics.assess import importance_findings
    from kameleon.core.populations.evidence import Evidence

    ev = Evidence(log_evidence=0.0, standard_error=0.1, ess=135.0, pareto_k=0.3, draws=20_000)
    assert importance_findings(ev, 1) == []
    (finding,) = importance_findings(ev, 4)
    assert finding.code == "importance_ess" and finding.threshold == 400
    assert "135" in finding.message and "per chain" in finding.message


@pytest.mark.slow
def test_a_poor_fit_on_the_bent_banana_warns() -> None:
    """The validation suite at full size (4 chains x 5000 + 5000, seed 1) found
    ``importance`` wrong on B(0.1, 100) in 8-d and silent: the proposals, fitted to the
    warm-up, miss the banana's bent tails (the weighted sd of one coordinate 0.55 of
    the truth), the weights' Pareto k stays under 0.7 because no draw lands where the
    weights would be large, and the weights' ESS, 135 of 20 000, passed a bar of 100
    for the whole session. A hundred per chain catches it."""
    from kameleon.core.validation.cases import cases
    from kameleon.core.validation.suite import run_case

    (case,) = [c for c in cases() if c.name == "banana-B(0.1,100)-8d"]
    result = run_case(case, "importance", chains=4, warmup=5000, iterations=5000, seed=1)
    assert not result.right
    assert "importance_ess" in result.warnings
