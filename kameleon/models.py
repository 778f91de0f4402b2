"""The service's answers as typed, immutable Python objects.

Each class has ``from_json``, which reads the JSON body of the protocol (openapi.yaml)
and ignores fields it does not know, so a newer service does not break an older client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ChainDiagnostics",
    "ChainSummary",
    "Consensus",
    "Diagnostics",
    "Draws",
    "EvidenceSummary",
    "Finding",
    "Health",
    "ParameterDiagnostics",
    "Proposal",
    "Session",
    "SessionPage",
    "StepAnswer",
    "TellOutcome",
    "log_weights_from_json",
]


def _float(value: Any) -> float:
    """A JSON number, ``null`` read as NaN (the service's spelling of undefined)."""
    return math.nan if value is None else float(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class Health:
    """``GET /v1/health``: ``ok`` is true when the service and its store are ready."""

    status: str
    store: str
    store_ready: bool
    version: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Health:
        return cls(
            status=str(doc.get("status", "")),
            store=str(doc.get("store", "")),
            store_ready=bool(doc.get("store_ready", False)),
            version=str(doc.get("version", "")),
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """A convergence warning of the service (``code``: see the README's table), with the
    fields of :class:`kameleon.core.diagnostics.findings.Finding`; ``value`` is ``inf`` where the
    service says ``null`` (infinite)."""

    code: str
    parameter: str | None
    chain: int | None
    value: float
    threshold: float
    message: str

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Finding:
        chain = doc.get("chain")
        value = doc.get("value")
        return cls(
            code=str(doc["code"]),
            parameter=doc.get("parameter"),
            chain=None if chain is None else int(chain),
            value=math.inf if value is None else float(value),
            threshold=float(doc.get("threshold", math.nan)),
            message=str(doc.get("message", "")),
        )


@dataclass(frozen=True, slots=True)
class ChainSummary:
    chain: int
    status: str
    iterations: int
    evaluations: int
    acceptance_rate: float | None
    resets: int

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ChainSummary:
        return cls(
            chain=int(doc["chain"]),
            status=str(doc.get("status", "")),
            iterations=int(doc.get("iterations", 0)),
            evaluations=int(doc.get("evaluations", 0)),
            acceptance_rate=_opt_float(doc.get("acceptance_rate")),
            resets=int(doc.get("resets", 0)),
        )


@dataclass(frozen=True, slots=True)
class Session:
    """A session's summary (``POST /v1/sessions``, ``GET /v1/sessions/{id}``)."""

    id: str
    algorithm: str
    dim: int
    chains: int
    seed: int
    status: str
    warmup: int
    max_iterations: int | None
    param_names: list[str]
    options: dict[str, Any]
    iterations: int
    evaluations: int
    acceptance_rate: float | None
    chain_summaries: list[ChainSummary]
    pseudo_marginal: bool = False
    initial_radius: float | None = None
    max_initial_attempts: int | None = None
    created_at: datetime | None = None
    stop: dict[str, Any] | None = None
    stopped_by: str | None = None
    warnings: list[Finding] | None = None
    warnings_draws: int | None = None

    @property
    def done(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Session:
        warnings = doc.get("warnings")
        max_iterations = doc.get("max_iterations")
        attempts = doc.get("max_initial_attempts")
        warnings_draws = doc.get("warnings_draws")
        return cls(
            id=str(doc["id"]),
            algorithm=str(doc.get("algorithm", "")),
            dim=int(doc.get("dim", 0)),
            chains=int(doc.get("chains", 0)),
            seed=int(doc.get("seed", 0)),
            status=str(doc.get("status", "")),
            warmup=int(doc.get("warmup", 0)),
            max_iterations=None if max_iterations is None else int(max_iterations),
            param_names=[str(n) for n in doc.get("param_names") or []],
            options=dict(doc.get("options") or {}),
            iterations=int(doc.get("iterations", 0)),
            evaluations=int(doc.get("evaluations", 0)),
            acceptance_rate=_opt_float(doc.get("acceptance_rate")),
            chain_summaries=[ChainSummary.from_json(c) for c in doc.get("chain_summaries") or []],
            pseudo_marginal=bool(doc.get("pseudo_marginal", False)),
            initial_radius=_opt_float(doc.get("initial_radius")),
            max_initial_attempts=None if attempts is None else int(attempts),
            created_at=_time(doc.get("created_at")),
            stop=doc.get("stop"),
            stopped_by=doc.get("stopped_by"),
            warnings=None if warnings is None else [Finding.from_json(w) for w in warnings],
            warnings_draws=None if warnings_draws is None else int(warnings_draws),
        )


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of ``GET /v1/sessions``; ``next`` is the cursor of the next, or None."""

    sessions: list[Session]
    next: str | None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SessionPage:
        return cls(
            sessions=[Session.from_json(s) for s in doc.get("sessions") or []],
            next=doc.get("next"),
        )


@dataclass(frozen=True, slots=True)
class Proposal:
    """A point a chain needs evaluated; tell its log density under ``id``."""

    id: str
    chain: int
    iteration: int
    kind: str
    x: list[float]
    lease_expires_at: datetime | None = None
    #: The evaluation's place in its transition (from 0).
    step: int = 0
    #: Kind ``"conditional"`` (``gibbs``): the block to draw from its full conditional
    #: at ``x``, by its place in the ``blocks`` option, and its coordinates.
    block: int | None = None
    indices: list[int] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Proposal:
        block, indices = doc.get("block"), doc.get("indices")
        return cls(
            id=str(doc["id"]),
            chain=int(doc["chain"]),
            iteration=int(doc.get("iteration", 0)),
            kind=str(doc.get("kind", "proposal")),
            x=[float(v) for v in doc["x"]],
            lease_expires_at=_time(doc.get("lease_expires_at")),
            step=int(doc.get("step", 0)),
            block=None if block is None else int(block),
            indices=None if indices is None else [int(k) for k in indices],
        )


@dataclass(frozen=True, slots=True)
class TellOutcome:
    """What became of a told result: ``initialized``, ``outside_support``, ``accepted``,
    ``rejected``, ``step`` (within a transition), ``duplicate`` (applied before with
    this value: nothing changed) or ``held`` (a round's evaluation told ahead of its
    turn: applied once those before it are told)."""

    id: str
    chain: int
    outcome: str

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TellOutcome:
        return cls(id=str(doc["id"]), chain=int(doc["chain"]), outcome=str(doc["outcome"]))


@dataclass(frozen=True, slots=True)
class Lease:
    """A proposal's lease as renewed (``lease_expires_at``) or handed back (``None``)."""

    id: str
    chain: int
    lease_expires_at: datetime | None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Lease:
        return cls(
            id=str(doc["id"]),
            chain=int(doc["chain"]),
            lease_expires_at=_time(doc.get("lease_expires_at")),
        )


@dataclass(frozen=True, slots=True)
class StepAnswer:
    """The answer of ask (``results`` empty), tell (``proposals`` empty) or step."""

    results: list[TellOutcome]
    proposals: list[Proposal]
    status: str
    done: bool
    next_lease_expires_at: str | None = None  # with no proposals: when one may free up

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepAnswer:
        return cls(
            results=[TellOutcome.from_json(r) for r in doc.get("results") or []],
            proposals=[Proposal.from_json(p) for p in doc.get("proposals") or []],
            status=str(doc.get("status", "")),
            done=bool(doc.get("done", False)),
            next_lease_expires_at=doc.get("next_lease_expires_at"),
        )


@dataclass(frozen=True, slots=True)
class ParameterDiagnostics:
    """One parameter's diagnostics; NaN where undefined."""

    name: str
    mean: float
    sd: float
    mcse_mean: float
    ess_bulk: float
    ess_tail: float
    r_hat: float
    autocorrelation_time: float = math.nan  # ensemble and smc only

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ParameterDiagnostics:
        return cls(
            name=str(doc["name"]),
            mean=_float(doc.get("mean")),
            sd=_float(doc.get("sd")),
            mcse_mean=_float(doc.get("mcse_mean")),
            ess_bulk=_float(doc.get("ess_bulk")),
            ess_tail=_float(doc.get("ess_tail")),
            r_hat=_float(doc.get("r_hat")),
            autocorrelation_time=_float(doc.get("autocorrelation_time")),
        )


@dataclass(frozen=True, slots=True)
class ChainDiagnostics:
    """One chain: transitions done, post-warm-up draws, post-warm-up acceptance rate."""

    chain: int
    iterations: int
    draws: int
    acceptance_rate: float | None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ChainDiagnostics:
        return cls(
            chain=int(doc["chain"]),
            iterations=int(doc.get("iterations", 0)),
            draws=int(doc.get("draws", 0)),
            acceptance_rate=_opt_float(doc.get("acceptance_rate")),
        )


@dataclass(frozen=True, slots=True)
class EvidenceSummary:
    """What importance weights say (``importance``): the log evidence (the log of the
    density's normalising constant) and its standard error, the weights' effective
    sample size, their Pareto k (above 0.7: unreliable), over ``draws`` draws. For
    ``tempering``: its stepping stones' log evidence, the chains' spread as the standard
    error, the smallest stone's effective sample size, and a NaN Pareto k. For ``smc``:
    its stages' log evidence, the chains' spread as the standard error, the smallest
    stage's conditional effective sample size (in particles), and a NaN Pareto k."""

    log_evidence: float
    standard_error: float
    ess: float
    pareto_k: float
    draws: int

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> EvidenceSummary:
        log_evidence = doc.get("log_evidence")
        return cls(
            log_evidence=-math.inf if log_evidence is None else float(log_evidence),
            standard_error=_float(doc.get("standard_error")),
            ess=_float(doc.get("ess")),
            pareto_k=_float(doc.get("pareto_k")),
            draws=int(doc.get("draws", 0)),
        )


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """``GET /v1/sessions/{id}/diagnostics``: per parameter and per chain, warnings, and
    for importance sampling, parallel tempering and sequential Monte Carlo the evidence."""

    draws: int
    parameters: list[ParameterDiagnostics]
    chains: list[ChainDiagnostics]
    warnings: list[Finding] = field(default_factory=list)
    evidence: EvidenceSummary | None = None

    @property
    def max_r_hat(self) -> float:
        """The largest R-hat of any parameter (NaN when none is defined)."""
        values = [p.r_hat for p in self.parameters if not math.isnan(p.r_hat)]
        return max(values) if values else math.nan

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Diagnostics:
        return cls(
            draws=int(doc.get("draws", 0)),
            parameters=[ParameterDiagnostics.from_json(p) for p in doc.get("parameters") or []],
            chains=[ChainDiagnostics.from_json(c) for c in doc.get("chains") or []],
            warnings=[Finding.from_json(w) for w in doc.get("warnings") or []],
            evidence=(EvidenceSummary.from_json(doc["evidence"]) if doc.get("evidence") else None),
        )


def log_weights_from_json(doc: Mapping[str, Any]) -> npt.NDArray[np.float64]:
    """The log weights of a ``GET .../weights`` answer, shape ``(chains, draws)``, a
    null (a weight of zero) as ``-inf``."""
    rows = [
        [-math.inf if v is None else float(v) for v in ch["log_weights"]] for ch in doc["chains"]
    ]
    return np.array(rows, dtype=np.float64).reshape(len(rows), int(doc["draws"]))


@dataclass(frozen=True, eq=False)
class Draws:
    """Draws of a session, every page read.

    Attributes
    ----------
    param_names
        One name per dimension.
    draws
        Shape ``(chains, draws, dim)``; the chains are cut to the shortest selected one
        (as the NPY format does), so the array is rectangular.
    log_density
        Shape ``(chains, draws)``; ``None`` for NPY, which carries only the draws.
    iterations
        Each draw's iteration number, shape ``(chains, draws)``; ``None`` for NPY.
    chains
        The chain ids, in the order of the first axis.
    accepted
        Whether each draw's transition accepted, shape ``(chains, draws)``; ``None`` for
        NPY and for a service that does not send it.
    sample_stats
        The sampler's per-transition statistics by name (``step_size``, ``tree_depth``,
        ``n_steps``, ``diverging``, ``energy``), each of shape ``(chains, draws)``; empty
        for the samplers that record none.
    """

    param_names: list[str]
    draws: npt.NDArray[np.float64]
    log_density: npt.NDArray[np.float64] | None
    iterations: npt.NDArray[np.int64] | None
    chains: list[int]
    accepted: npt.NDArray[np.bool_] | None = None
    sample_stats: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)

    @classmethod
    def from_pages(cls, pages: Sequence[Mapping[str, Any]], dim: int | None = None) -> Draws:
        """Join JSON pages (each ``{"param_names", "chains": [...], "next"}``)."""
        names = [str(n) for n in pages[0].get("param_names") or []] if pages else []
        width = len(names) if dim is None else dim
        rows: dict[int, list[list[float]]] = {}
        logd: dict[int, list[float]] = {}
        its: dict[int, list[int]] = {}
        acc: dict[int, list[bool]] = {}
        recorded: dict[str, dict[int, list[float]]] = {}
        for page in pages:
            for ch in page.get("chains") or []:
                c = int(ch["chain"])
                for name, values in (ch.get("sample_stats") or {}).items():
                    recorded.setdefault(str(name), {}).setdefault(c, []).extend(
                        _float(v) for v in values
                    )
                rows.setdefault(c, []).extend(ch.get("draws") or [])
                logd.setdefault(c, []).extend(_float(v) for v in ch.get("log_density") or [])
                its.setdefault(c, []).extend(int(i) for i in ch.get("iterations") or [])
                acc.setdefault(c, []).extend(bool(a) for a in ch.get("accepted") or [])
        order = sorted(rows)
        common = min((len(rows[c]) for c in order), default=0)
        draws = np.empty((len(order), common, width))
        log_density = np.empty((len(order), common))
        iterations = np.zeros((len(order), common), dtype=np.int64)
        for k, c in enumerate(order):
            if common:
                draws[k] = np.asarray(rows[c][:common], dtype=np.float64).reshape(common, width)
                log_density[k] = logd[c][:common]
                if len(its[c]) >= common:
                    iterations[k] = its[c][:common]
        accepted = None
        if order and all(len(acc[c]) >= common for c in order):
            accepted = np.array([acc[c][:common] for c in order], dtype=bool).reshape(
                len(order), common
            )
        stats = {
            name: np.array([by_chain[c][:common] for c in order], dtype=np.float64).reshape(
                len(order), common
            )
            for name, by_chain in recorded.items()
            if all(len(by_chain.get(c, [])) >= common for c in order)
        }
        return cls(names, draws, log_density, iterations, order, accepted, stats)


@dataclass(frozen=True, eq=False)
class Consensus:
    """Consensus Monte Carlo's answer (``POST /v1/consensus``, or
    :func:`kameleon.consensus` in process).

    Attributes
    ----------
    method
        ``"weighted"`` or ``"gaussian"``.
    draws
        Consensus draws of the full posterior, shape ``(draws, dim)``.
    mean, sd, covariance
        The combined mean, standard deviations and covariance.
    param_names
        One name per dimension.
    shard_draws
        The draws of each shard used.
    warnings
        ``(code, message)`` pairs: ``shard_warnings`` (a shard's own diagnostics warn),
        ``non_gaussian`` (a shard's marginal is skewed or heavy-tailed: consensus is
        exact only for Gaussian subposteriors).
    """

    method: str
    draws: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    covariance: np.ndarray
    param_names: list[str]
    shard_draws: list[int]
    warnings: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Consensus:
        dim = len(doc["param_names"])
        return cls(
            method=str(doc["method"]),
            draws=np.asarray(doc["draws"], dtype=float).reshape(-1, dim),
            mean=np.asarray(doc["mean"], dtype=float),
            sd=np.asarray(doc["sd"], dtype=float),
            covariance=np.asarray(doc["covariance"], dtype=float).reshape(dim, dim),
            param_names=[str(n) for n in doc["param_names"]],
            shard_draws=[int(s["draws"]) for s in doc["shards"]],
            warnings=[(str(w["code"]), str(w["message"])) for w in doc.get("warnings") or []],
        )
