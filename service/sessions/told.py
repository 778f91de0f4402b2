"""Told results as a request carries them: parsed and checked before anything is decided
(:func:`parse`), and the 409 that refuses those that cannot be applied (:func:`refusal`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kameleon.core.base import FloatArray
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
    for j, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise Invalid(f"results[{i}].gradient[{j}] must be a number", field=f"{field}.{j}")
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
    for i, result in enumerate(results):
        pid = parse_id(result.id)
        if pid is None:
            raise Invalid(
                f"results[{i}].id: {result.id!r} is not a proposal id", field=f"results.{i}.id"
            )
        first = seen.setdefault(result.id, i)
        if first != i and not _same_value(results[first].log_density, result.log_density):
            raise Conflict(
                f"results[{i}].id: {result.id!r} is told twice in this request with different "
                f"values (results[{first}] too); nothing was applied",
                ids=[result.id],
            )
        told.append(Told(i, pid, result.log_density, _gradient(meta, i, result)))
    return told
