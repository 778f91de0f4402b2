"""Told results as a request carries them: parsed and checked before anything is decided
(:func:`parse`), and the 409 that refuses those that cannot be applied (:func:`refusal`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kameleon.core.base import FloatArray, Parts
from kameleon.service.ids import parse_id
from kameleon.service.sessions.chains import ChainView
from kameleon.service.sessions.decide import Told
from kameleon.service.sessions.errors import Conflict, Invalid
from kameleon.service.sessions.meta import SessionMeta

__all__ = ["Result", "conflict", "parse", "refusal"]


class Result(Protocol):
    """A told result as the protocol defines it (``schemas.TellResult``)."""

    @property
    def id(self) -> str: ...
    @property
    def log_density(self) -> float: ...
    @property
    def gradient(self) -> Sequence[Any] | None: ...
    @property
    def log_prior(self) -> float | None: ...
    @property
    def log_likelihood(self) -> float | None: ...
    @property
    def prior_gradient(self) -> Sequence[Any] | None: ...
    @property
    def model_fields_set(self) -> set[str]: ...


def refusal(
    refused: Sequence[int],
    ids: Sequence[str],
    by_chain: dict[int, list[Told]],
    current: dict[int, ChainView],
) -> Conflict:
    """The 409 for results that cannot be applied, saying for each why: told before with
    another value (the first stands), or not outstanding (never issued by its chain, or
    made obsolete by a reset)."""
    told = {t.at: t for ts in by_chain.values() for t in ts}
    reasons = []
    for at in refused:
        pid = told[at].pid
        state = current[pid.chain].state
        answered = pid.epoch == state.epoch and (
            pid.iteration <= state.iteration if pid.iteration else state.logdensity is not None
        )
        why = (
            "was told before with another value; the first value stands"
            if answered
            else "is not outstanding: its chain never issued it, or a reset made it obsolete"
        )
        reasons.append((ids[at], why))
    return conflict(reasons)


def conflict(refused: Sequence[tuple[str, str]]) -> Conflict:
    """The 409 for proposal ids that cannot be used, each with why: one entry per id in
    ``errors``, and the first in ``detail``."""
    errors = [{"id": i, "message": f"proposal {i} {why}"} for i, why in refused]
    detail = errors[0]["message"]
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more: see errors)"
    return Conflict(detail, ids=[i for i, _ in refused], errors=errors)


def _same_value(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _nan(dim: int) -> FloatArray:
    out = np.full(dim, math.nan)
    out.flags.writeable = False
    return out


#: The gradient given to a sampler at a point outside the support, where none is used.
_UNUSED: dict[int, FloatArray] = {}


def _vector(meta: SessionMeta, i: int, name: str, values: Sequence[Any]) -> FloatArray:
    """A told list of ``dim`` finite numbers as an array (:class:`Invalid` naming
    ``results.i.name`` or its offending coordinate otherwise)."""
    field = f"results.{i}.{name}"
    if len(values) != meta.dim:
        raise Invalid(
            f"results[{i}].{name} must have {meta.dim} values, not {len(values)}", field=field
        )
    for j, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise Invalid(f"results[{i}].{name}[{j}] must be a number", field=f"{field}.{j}")
    try:
        vector = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        raise Invalid(f"results[{i}].{name} must be finite", field=field) from None
    bad = np.flatnonzero(~np.isfinite(vector))
    if bad.size:
        raise Invalid(f"results[{i}].{name}[{bad[0]}] must be finite", field=f"{field}.{bad[0]}")
    vector.flags.writeable = False
    return vector


def _parts(meta: SessionMeta, i: int, result: Result) -> Parts:
    """The target's parts told for a minibatch (``sgld``): the log prior and the
    minibatch's log likelihood, each with its gradient, all required except where the
    log prior is -inf (the point is outside the support, and nothing else is used)."""
    if result.log_prior is None:
        raise Invalid(
            f"results[{i}].log_prior: {meta.algorithm} needs the log prior density at every "
            "point (a number, or -inf outside the support)",
            field=f"results.{i}.log_prior",
        )
    log_prior = float(result.log_prior)
    if log_prior == -math.inf:
        unused = _UNUSED.setdefault(meta.dim, _nan(meta.dim))
        return Parts(log_prior, math.nan, unused, unused)
    needs = {
        "log_likelihood": "the minibatch's log likelihood (the sum over its data points)",
        "prior_gradient": f"the log prior's gradient: a list of {meta.dim} numbers",
        "gradient": f"the minibatch log likelihood's gradient: a list of {meta.dim} numbers",
    }
    for name, what in needs.items():
        if getattr(result, name) is None:
            raise Invalid(
                f"results[{i}].{name}: {meta.algorithm} needs {what} at every point",
                field=f"results.{i}.{name}",
            )
    assert result.log_likelihood is not None
    assert result.prior_gradient is not None and result.gradient is not None
    return Parts(
        log_prior,
        float(result.log_likelihood),
        _vector(meta, i, "prior_gradient", result.prior_gradient),
        _vector(meta, i, "gradient", result.gradient),
    )


def _value(meta: SessionMeta, i: int, result: Result) -> tuple[float, Parts | None]:
    """The told value, and the target's parts for a sampler told them (``sgld``, whose
    value is the estimate ``log_prior + (N / n) log_likelihood``, and which ignores a
    told ``log_density``). Every other sampler needs ``log_density``."""
    if not meta.sampler.evaluation.parts:
        if "log_density" not in result.model_fields_set:
            raise Invalid(
                f"results[{i}].log_density: Field required (the log density at the point)",
                field=f"results.{i}.log_density",
            )
        return result.log_density, None
    parts = _parts(meta, i, result)
    if parts.log_prior == -math.inf:
        return -math.inf, parts
    assert meta.sampler.parts_value is not None
    value = meta.sampler.parts_value(meta.params, parts)
    if not math.isfinite(value):
        raise Invalid(
            f"results[{i}].log_likelihood: the estimate log_prior + (N / n) log_likelihood "
            "is beyond the float range",
            field=f"results.{i}.log_likelihood",
        )
    return value, parts


#: The types of a told gradient's entries as JSON gives them (not ``bool``).
_NUMBER_TYPES = frozenset((float, int))


def _gradient(meta: SessionMeta, i: int, result: Result) -> FloatArray | None:
    """The told gradient as an array, for a sampler that needs one (``None`` for the
    others, which ignore it); at ``-inf``, where it is not used, it may be left out, and
    the sampler is given NaNs."""
    if not meta.sampler.evaluation.gradient:
        return None
    field = f"results.{i}.gradient"
    values = result.gradient
    finite_density = math.isfinite(result.log_density)
    if values is None:
        if not finite_density:  # not used: the point is rejected
            return _UNUSED.setdefault(meta.dim, _nan(meta.dim))
        raise Invalid(
            f"results[{i}].gradient: {meta.algorithm} needs the gradient of the log density "
            f"at every point: a list of {meta.dim} numbers",
            field=field,
        )
    if len(values) != meta.dim:
        raise Invalid(
            f"results[{i}].gradient must have {meta.dim} values, not {len(values)}", field=field
        )
    if not _NUMBER_TYPES.issuperset(map(type, values)):  # one pass in C; then find it
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise Invalid(
                    f"results[{i}].gradient[{j}] must be a number", field=f"{field}.{j}"
                )
    try:
        gradient = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        raise Invalid(f"results[{i}].gradient must be finite", field=field) from None
    if not finite_density:
        return _UNUSED.setdefault(meta.dim, _nan(meta.dim))
    bad = np.flatnonzero(~np.isfinite(gradient))
    if bad.size:
        raise Invalid(
            f"results[{i}].gradient[{bad[0]}] must be finite where the log density is",
            field=f"{field}.{bad[0]}",
        )
    gradient.flags.writeable = False
    return gradient


def parse(meta: SessionMeta, results: Sequence[Result]) -> list[Told]:
    """Parse every result before anything is applied (:class:`Invalid` on the first bad
    one)."""
    told = []
    seen: dict[str, int] = {}
    values: list[float] = []
    for i, result in enumerate(results):
        value, parts = _value(meta, i, result)
        values.append(value)
        pid = parse_id(result.id)
        if pid is None:
            raise Invalid(
                f"results[{i}].id: {result.id!r} is not a proposal id", field=f"results.{i}.id"
            )
        first = seen.setdefault(result.id, i)
        if first != i and not _same_value(values[first], value):
            raise Conflict(
                f"results[{i}].id: {result.id!r} is told twice in this request with different "
                f"values (results[{first}] too); nothing was applied",
                ids=[result.id],
            )
        told.append(Told(i, pid, value, _gradient(meta, i, result), parts))
    return told
