"""What a session is: its metadata, set at creation and revised by an update, and the
checks of a new one."""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kameleon.service.config import Settings
from kameleon.service.core_api import (
    DEFAULT_MAX_ATTEMPTS,
    SAMPLERS,
    OptionError,
    Sampler,
    StopRule,
    describe_params,
    initial_point,
    start_radius,
)
from kameleon.service.jsonio import dumps
from kameleon.service.sessions.budget import describe, session_bytes
from kameleon.service.sessions.errors import Invalid

if TYPE_CHECKING:
    from kameleon.service.schemas import SessionCreate

__all__ = ["SessionMeta", "new_meta", "stop_doc"]


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What a session is; written at creation, revised by an update (``revision``)."""

    id: str
    owner: str
    algorithm: str
    dim: int
    chains: int
    seed: int
    pseudo_marginal: bool
    warmup: int
    max_iterations: int | None
    param_names: tuple[str, ...]
    options: dict[str, Any]
    created_at: float
    sampler: Sampler[Any, Any] = field(compare=False, repr=False)
    params: Any = field(compare=False, repr=False)
    #: Half-width of the box starting points are drawn from; ``None``: the given initial
    #: points are used exactly and never replaced (and sessions made before there was a
    #: choice, which started at the given point or the origin).
    initial_radius: float | None = None
    #: The user's initial rows (one, or one per chain): the centres of those boxes, or
    #: the starting points themselves; ``None``: none were given (boxes about the origin).
    initial_center: tuple[tuple[float, ...], ...] | None = None
    max_initial_attempts: int = DEFAULT_MAX_ATTEMPTS
    stop: StopRule | None = None
    #: How many times the session was revised (``PATCH``: a later ``max_iterations`` or
    #: another stopping rule); 0 as created.
    revision: int = 0
    #: The power of the prior in the target when a tell gives ``log_prior`` and
    #: ``log_likelihood`` apart: the told value is ``prior_power * log_prior +
    #: log_likelihood`` (a consensus shard of J: 1 / J). 1 for sessions made before.
    prior_power: float = 1.0

    @staticmethod
    def build(doc: dict[str, Any]) -> SessionMeta:
        """The metadata of a stored document (see :meth:`to_bytes`)."""
        sampler = SAMPLERS[doc["algorithm"]]
        params = sampler.make_params(doc["dim"], doc["options"], warmup=doc["warmup"])
        stop = doc.get("stop")  # absent from sessions made before stopping rules
        return SessionMeta(
            id=doc["id"],
            owner=doc["owner"],
            algorithm=doc["algorithm"],
            dim=doc["dim"],
            chains=doc["chains"],
            seed=doc["seed"],
            pseudo_marginal=doc["pseudo_marginal"],
            warmup=doc["warmup"],
            max_iterations=doc["max_iterations"],
            param_names=tuple(doc["param_names"]),
            options=doc["options"],
            created_at=doc["created_at"],
            sampler=sampler,
            params=params,
            initial_radius=doc.get("initial_radius"),
            initial_center=_rows(doc.get("initial_center")),
            max_initial_attempts=doc.get("max_initial_attempts", DEFAULT_MAX_ATTEMPTS),
            stop=StopRule.of(stop) if stop is not None else None,
            revision=doc.get("revision", 0),
            prior_power=doc.get("prior_power", 1.0),
        )

    @property
    def estimated_bytes(self) -> int:
        """The memory the session may need (:mod:`.budget`)."""
        return session_bytes(
            self.algorithm, self.dim, self.chains, self.params, self.max_iterations
        )

    def to_bytes(self) -> bytes:
        center = self.initial_center
        return dumps(
            {
                "id": self.id,
                "owner": self.owner,
                "algorithm": self.algorithm,
                "dim": self.dim,
                "chains": self.chains,
                "seed": self.seed,
                "pseudo_marginal": self.pseudo_marginal,
                "warmup": self.warmup,
                "max_iterations": self.max_iterations,
                "param_names": list(self.param_names),
                "options": self.options,
                "created_at": self.created_at,
                "initial_radius": self.initial_radius,
                "initial_center": None if center is None else [list(r) for r in center],
                "max_initial_attempts": self.max_initial_attempts,
                "stop": stop_doc(self.stop),
                "revision": self.revision,
                "prior_power": self.prior_power,
            }
        )

    def center(self, chain: int) -> tuple[float, ...] | None:
        """The centre of ``chain``'s starting-point box (``None``: the origin)."""
        rows = self.initial_center
        if rows is None:
            return None
        return rows[chain] if len(rows) > 1 else rows[0]

    def first_point(self, chain: int) -> Any:
        """Where ``chain`` starts: its first drawn point, or its given one."""
        if self.initial_radius is None:
            return self.center(chain)  # given: not None
        return initial_point(
            self.dim,
            seed=self.seed,
            chain=chain,
            attempt=0,
            center=self.center(chain),
            radius=self.initial_radius,
        )

    def resolved_options(self) -> dict[str, Any]:
        defaults = describe_params(type(self.params), dim=None, warmup=None)
        return {name: getattr(self.params, name) for name in defaults}

    @property
    def stats(self) -> tuple[str, ...]:
        """The per-transition statistics each draw row carries (the sampler's)."""
        return self.sampler.stats

    def is_done(self, state: Any) -> bool:
        return self.max_iterations is not None and state.iteration >= self.max_iterations


def _rows(value: Any) -> tuple[tuple[float, ...], ...] | None:
    return None if value is None else tuple(tuple(float(v) for v in row) for row in value)


def stop_doc(rule: StopRule | None) -> dict[str, Any] | None:
    if rule is None:
        return None
    return {"rhat": rule.rhat, "ess": rule.ess, "check_every": rule.check_every}


def new_meta(body: SessionCreate, owner: str, settings: Settings) -> SessionMeta:
    """The metadata of a new session as ``body`` asks for it, checked against the
    service's limits (:class:`Invalid` naming the field on the first failure)."""
    _check_limits(body, settings)
    sampler = SAMPLERS[body.algorithm]
    try:
        params = sampler.make_params(body.dim, body.options, warmup=body.warmup)
    except OptionError as exc:
        raise Invalid(str(exc), field=f"options.{exc.option}") from None
    _check_budget(body, params, settings)
    rows = _initial_rows(body)
    radius = start_radius(rows is not None, body.initial_radius)
    if (
        rows is not None
        and radius is not None
        and not math.isfinite(max(abs(v) for row in rows for v in row) + radius)
    ):
        raise Invalid("initial ± initial_radius must be finite", field="initial_radius")
    names = body.param_names or [f"x{i}" for i in range(body.dim)]
    if len(names) != body.dim or len(set(names)) != body.dim:
        raise Invalid("param_names must be dim distinct names", field="param_names")
    if body.pseudo_marginal and (sampler.evaluation.gradient or sampler.evaluation.parts):
        raise Invalid(
            f"{body.algorithm} uses the gradient of the log density, which an unbiased "
            "estimate of the density does not give: pseudo_marginal needs a sampler "
            "without gradients",
            field="pseudo_marginal",
        )
    refusal = (
        sampler.pseudo_marginal_refusal(params)
        if body.pseudo_marginal and sampler.pseudo_marginal_refusal is not None
        else None
    )
    if refusal is not None:
        raise Invalid(f"{body.algorithm} {refusal}", field="pseudo_marginal")
    stop = None
    if body.stop is not None and sampler.weighted:
        raise Invalid(
            f"{body.algorithm} draws are weighted, not chains: they have no R-hat for a "
            "stopping rule; give max_iterations instead",
            field="stop",
        )
    if body.stop is not None:
        try:
            stop = StopRule(body.stop.rhat, body.stop.ess, body.stop.check_every)
        except ValueError as exc:
            raise Invalid(str(exc), field="stop") from None
    return SessionMeta(
        id=secrets.token_hex(12),
        owner=owner,
        algorithm=body.algorithm,
        dim=body.dim,
        chains=body.chains,
        seed=body.seed if body.seed is not None else secrets.randbits(53),
        pseudo_marginal=body.pseudo_marginal,
        warmup=body.warmup,
        max_iterations=body.max_iterations,
        param_names=tuple(names),
        options=dict(body.options),
        created_at=time.time(),
        sampler=sampler,
        params=params,
        initial_radius=radius,
        initial_center=_rows(rows),
        max_initial_attempts=body.max_initial_attempts,
        stop=stop,
        prior_power=body.prior_power,
    )


def _check_limits(body: SessionCreate, s: Settings) -> None:
    if body.dim > s.max_dim:
        raise Invalid(f"dim is over the limit of {s.max_dim}", field="dim")
    if body.chains > s.max_chains:
        raise Invalid(f"chains is over the limit of {s.max_chains}", field="chains")
    for name in ("warmup", "max_iterations"):
        value = getattr(body, name)
        if value is not None and value > s.max_iterations_limit:
            raise Invalid(f"{name} is over the limit of {s.max_iterations_limit}", field=name)


def _check_budget(body: SessionCreate, params: Any, s: Settings) -> None:
    """Refuse, before anything is allocated, a session that would need more memory than
    one may have."""
    need = session_bytes(body.algorithm, body.dim, body.chains, params, body.max_iterations)
    if need > s.max_session_bytes:
        draws = " and its draws (max_iterations)" if body.max_iterations is not None else ""
        raise Invalid(
            f"this session would need about {describe(need)} of memory for its "
            f"{body.chains} chain(s) of {body.algorithm} in {body.dim} dimensions{draws}; "
            f"the limit per session is {describe(s.max_session_bytes)}",
            field="dim",
            bytes=need,
            limit=s.max_session_bytes,
        )


def _initial_rows(body: SessionCreate) -> list[list[float]] | None:
    """The user's initial rows, checked: one row, or one per chain."""
    if body.initial is None:
        return None
    rows = body.initial
    if len(rows) not in (1, body.chains):
        raise Invalid(
            f"initial must have 1 or {body.chains} rows, not {len(rows)}", field="initial"
        )
    for row in rows:
        if len(row) != body.dim:
            raise Invalid(f"each initial row must have {body.dim} values", field="initial")
    return rows
