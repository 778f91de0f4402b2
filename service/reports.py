"""What the service reports, as pydantic models: draws, diagnostics and their warnings,
health, and problem details (the error body). The request and session models are in
:mod:`kameleon.service.schemas`, which re-exports these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kameleon.service.core_api import CODES

__all__ = [
    "ChainDiagnostics",
    "ChainWeights",
    "Diagnostics",
    "DrawsChain",
    "DrawsPage",
    "Health",
    "ParameterDiagnostics",
    "ProblemDetail",
    "ProblemError",
    "Trace",
    "TraceChain",
    "TraceRunning",
    "WarningCode",
    "WarningOut",
    "Weights",
]

WarningCode = Literal[CODES]  # type: ignore[valid-type]


class WarningOut(BaseModel):
    """A convergence problem, computed on the post-warm-up draws (chains cut to a common
    length) and each chain's post-warm-up acceptance rate. Codes:

    - `too_few_draws`: fewer than 4 post-warm-up draws per chain, R-hat and ESS
      undefined; nothing else is judged. `value`: draws per chain.
    - `nonfinite`: a parameter has NaN or infinite draws. `value`: how many.
    - `improper`: the chains drift without settling, as on a target that is not
      normalisable (a flat or unbounded log density, e.g. a missing prior): some R-hat
      is over 1.01 and a parameter whose R-hat warns reaches `threshold` (1e15) in
      magnitude, or every chain's log density keeps rising after warm-up, or never
      changes while the chain accepts over 95% of its proposals. One for the session
      (`value`: the largest magnitude a draw reached, `parameter`: whose); the `rhat`,
      `ess_*`, `acceptance_*`, `stuck` and `chain_mean` warnings it stands for are
      then not reported.
    - `rhat`: a parameter's rank-normalised split R-hat is over 1.01: the chains do
      not agree yet. `value` null: chains stuck at different points. For `smc`, R-hat
      across the chains' whole populations, beyond their Monte Carlo error (PROTOCOL.md).
    - `ess_bulk`, `ess_tail`: a parameter's bulk or tail ESS is under 100 per chain
      (`threshold`: 100 times the chains).
    - `acceptance_low`, `acceptance_high`: a chain accepted under 5% or over 95% of its
      proposals after warm-up.
    - `stuck`: a chain's longest run of identical consecutive draws is longer than
      `threshold`, the run a chain accepting 5% of its proposals exceeds with
      probability under 1% (225 for 1000 draws, 315 for 100 000). `value`: the run.
    - `chain_mean`: a chain's mean of `parameter` (rank-normalised) lies more than 5
      Monte Carlo standard errors from the other chains' (`value`, signed); judged
      only where the bulk ESS does not warn, one per chain for its worst parameter
      (for `smc`, a chain's population mean and its error, with 16 particles or more).
    - `divergent`, `low_ebfmi`: a Hamiltonian sampler's transitions diverged after
      warm-up, or a chain's energy Bayesian fraction of missing information is low.
    - `short_run` (`ensemble`, `smc`): the post-warm-up sweeps are fewer than
      `threshold` (50) autocorrelation times of `parameter` (emcee's rule); `value`:
      how many. For `smc`: over `threshold` (0.25) of the particles did not move after
      warm-up; `value`: that share.
    - `pareto_k` (`importance`): the importance weights' Pareto k (`value`) is over
      `threshold` (0.7): the weighted estimates and the evidence are unreliable.
    - `importance_ess` (`importance`): the weights' effective sample size (`value`) is
      under 100, or 0: no draw landed where the density is positive.
    - `unseen_modes` (`importance`): the chains found separate modes, and the share of
      chains that found one alone (`value`) is over 0.05: modes that no chain found are
      likely, and the evidence misses them.
    - `swap_rate_low` (`tempering`): two neighbouring rungs swapped with a probability
      (`value`, over the chains after warm-up) under `threshold` (0.02): the ladder is
      too sparse there, and the cold chain may miss modes the hot ones found.
    - `evidence_unreliable` (`tempering`, `smc`): the evidence's standard error is the
      spread of fewer than 4 chains' estimates (`value`: the chains; missing with one),
      or a stepping stone's weights have an effective sample size (`value`) under 100.
    - `smc_unfinished` (`smc`): `value` chains had not reached beta = 1 when warm-up
      ended; their last step to 1 was forced, so their evidence and their first
      post-warm-up draws are unreliable (`threshold`: 0).

    For `importance` the draws are not chains: `rhat`, `ess_*`, `acceptance_*`,
    `stuck`, `chain_mean` and `improper` are not judged.
    """

    code: WarningCode = Field(description="Stable code of the problem; see above.")
    parameter: str | None = Field(description="The parameter concerned, or null.")
    chain: int | None = Field(description="The chain concerned, or null.")
    value: float | None = Field(description="The number measured; null when infinite.")
    threshold: float = Field(description="The bound it crossed.")
    message: str = Field(description="The same, for a person.")


class DrawsChain(BaseModel):
    chain: int
    start: int = Field(description="Index of the first draw in this page (within the selection).")
    iterations: list[int]
    draws: list[list[float]]
    log_density: list[float]
    accepted: list[bool] = Field(
        description="Whether each draw's transition accepted its proposal (false for an "
        "initial point): the per-draw acceptance that ArviZ calls `accepted`."
    )
    sample_stats: dict[str, list[float]] | None = Field(
        None,
        description="Per-transition statistics of the samplers that record them, one "
        "value per draw, as Stan records them: `step_size` (the step size the transition "
        "used), `tree_depth` (nuts), `n_steps` (leapfrog steps, each one gradient "
        "evaluation), `diverging` (1: the trajectory diverged), `energy` (the Hamiltonian "
        "at the draw, for E-BFMI). Absent for the other samplers. In CSV they are the last "
        "columns, named as Stan names them (`stepsize__`, `treedepth__`, `n_leapfrog__`, "
        "`divergent__`, `energy__`).",
    )


class DrawsPage(BaseModel):
    param_names: list[str]
    chains: list[DrawsChain]
    next: str | None = Field(
        description="The next page as a reference relative to this request's URL "
        "(`draws?...`: resolve it against the URL you requested, as a browser resolves a "
        "link), or null on the last page."
    )


class TraceChain(BaseModel):
    chain: int
    length: int = Field(description="Draws of this chain in the selection, before thinning.")
    iterations: list[int] = Field(description="The kept draws' iterations (from 1).")
    draws: list[list[float]] = Field(
        description="One row per kept draw: the picked parameters, in the order of `params`."
    )
    log_density: list[float]


class TraceRunning(BaseModel):
    """Split R-hat and bulk ESS of the kept post-warm-up draws (chains cut to a common
    length) at checkpoints: an ESS of the thinned draws, at most their number."""

    iterations: list[int] = Field(description="Each checkpoint's last iteration.")
    r_hat: list[list[float | None]] = Field(
        description="Per checkpoint, per picked parameter; null where undefined."
    )
    ess_bulk: list[list[float | None]] = Field(
        description="Per checkpoint, per picked parameter; null where undefined."
    )


class Trace(BaseModel):
    param_names: list[str] = Field(description="Names of the picked parameters.")
    params: list[int] = Field(description="Indices of the picked parameters.")
    warmup: int
    stride: int = Field(
        description="Every chain keeps draws 0, stride, 2 stride, ... of its selection: the "
        "smallest power of two that leaves at most `points` draws in the longest chain."
    )
    chains: list[TraceChain]
    running: TraceRunning


class ParameterDiagnostics(BaseModel):
    name: str
    mean: float | None
    sd: float | None
    mcse_mean: float | None
    ess_bulk: float | None
    ess_tail: float | None
    r_hat: float | None
    autocorrelation_time: float | None = Field(
        None,
        description="`ensemble` and `smc` only (null otherwise, and where undefined): "
        "emcee's integrated autocorrelation time, in sweeps of the ensemble (each walker's "
        "steps), with the walkers averaged and Sokal's window (c = 5); also the "
        "evaluations per effective draw (of one walker). For `smc`, over the particles "
        "that moved after warm-up.",
    )


class ChainDiagnostics(BaseModel):
    chain: int
    iterations: int
    draws: int
    acceptance_rate: float | None


class Evidence(BaseModel):
    """What the importance weights say (`importance`), over every chain's post-warm-up
    draws cut to a common length, each weighed against the mixture of the chains'
    proposals; or the stepping stones of `tempering`, from every post-warm-up state of
    each chain's rungs; or the stages' incremental weights of `smc`."""

    log_evidence: float | None = Field(
        description="log of the mean weight: the log of the density's normalising "
        "constant (the log evidence when the density is prior times likelihood); null "
        "when every weight is zero. `tempering`: the mean of the chains' stepping-stone "
        "estimates of log Z; `smc`: the log of the mean of the chains' estimates of Z from "
        "their stages."
    )
    standard_error: float | None = Field(
        description="Its standard error, sd(w) / (sqrt(n) mean(w)): trusted only while "
        "pareto_k is at most 0.7. `tempering`: the chains' estimates' sd over "
        "sqrt(chains); `smc`: the sd of Z_c / mean(Z) over sqrt(chains) (the delta "
        "method); null with one chain."
    )
    ess: float | None = Field(
        description="The weights' effective sample size (Kish); `tempering`: the smallest "
        "over its stepping stones, summed over the chains; `smc`: the smallest conditional "
        "ESS a stage ended with, in particles, summed over the chains."
    )
    pareto_k: float | None = Field(
        description="The Pareto k of the weights' tail (Vehtari et al.): under 0.5 "
        "reliable, 0.5 to 0.7 slower, over 0.7 unreliable; null with too few draws, and "
        "for `tempering` and `smc`."
    )
    draws: int


class ChainWeights(BaseModel):
    chain: int
    log_weights: list[float | None] = Field(
        description="One per post-warm-up draw, in order; null for a weight of zero."
    )


class Weights(BaseModel):
    """The log weight of every post-warm-up draw, the chains cut to a common length (the
    draws the diagnostics judge): unnormalised, so that `exp(log_weights)` over all the
    chains, divided by its sum, weighs each draw."""

    draws: int = Field(description="Post-warm-up draws per chain: the chains cut alike.")
    weighted: bool = Field(
        description="Whether the draws are importance samples (`importance`), weighed "
        "against the mixture of every chain's proposal, as the evidence is; otherwise "
        "a Markov chain's draws, every log weight 0."
    )
    chains: list[ChainWeights]


class Diagnostics(BaseModel):
    draws: int = Field(
        description="Post-warm-up draws per chain used: the chains cut to a common length."
    )
    parameters: list[ParameterDiagnostics]
    chains: list[ChainDiagnostics]
    warnings: list[WarningOut] = Field(
        description="Convergence problems found; empty when there is none."
    )
    evidence: Evidence | None = Field(
        None,
        description="`importance`, `tempering` and `smc` only (null otherwise): the log "
        "evidence and its diagnostics. For `importance`, its parameters' statistics are "
        "the weighted mean and sd, the MCSE sd / sqrt(ess), `ess` as both ESS, and a null "
        "R-hat; `tempering`'s are its cold chains', as any Markov chain's; `smc`'s its "
        "particles', each read as a chain, as `ensemble`'s walkers.",
    )


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    store: str
    store_ready: bool | None = Field(
        description="Null from the liveness probe, which never asks the store."
    )
    version: str


class ProblemError(BaseModel):
    """One offending field (a body field's dotted path from the body, as in
    ``results.0.log_density``; a query or path parameter or a header by its name) or
    proposal id."""

    field: str | None = None
    id: str | None = None
    message: str


class ProblemDetail(BaseModel):
    """RFC 9457 problem details. ``errors`` names every offending field or proposal id
    (for a 409, ``ids`` lists the ids too: drop them and resend the rest)."""

    type: str = Field(
        description="What went wrong, as a URI: `https://kameleon.dev/problems/` then one "
        "of malformed-request (400), unauthorized (401), forbidden (403), not-found (404), "
        "method-not-allowed (405), conflict (409), payload-too-large (413), invalid (422), "
        "sampler-failed (422), "
        "quota-exceeded (429), store-unavailable (503), service-busy (503), internal (500, "
        "a bug). Stable: match on it, not on `title` or `detail`."
    )
    title: str
    status: int
    detail: str = Field(description="What went wrong here, for a person.")
    errors: list[ProblemError] = Field(
        description="Each offending field or proposal id; empty when the request as a "
        "whole is refused."
    )
    ids: list[str] | None = Field(None, description="409: the ids refused.")
    field: str | None = Field(None, description="The first offending field, if any.")
    bytes: int | None = Field(
        None, description="422 over the session budget, 429 over a memory quota: the bytes."
    )
    limit: int | None = Field(None, description="422, 429: the limit passed.")
    sessions: int | None = Field(None, description="429: the sessions this key keeps.")
