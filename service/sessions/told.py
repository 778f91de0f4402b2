"""Told results as a request carries them: parsed and checked before anything is decided
(:func:`parse`), and the 409 that refuses those that cannot be applied (:func:`refusal`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kameleon.service.core_api import FloatArray, Parts
from kameleon.service.ids import parse_id
from kameleon.service.sessions.chains import ChainView
from kameleon.service.sessions.errors import Conflict, Invalid
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.verdicts import Told, recorded

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
    def draw(self) -> Sequence[Any] | None: ...
    @property
    def model_fields_set(self) -> set[str]: ...


def refusal(
    meta: SessionMeta,
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
        chain = current[pid.chain]
        state = chain.state
        answered = pid.epoch == state.epoch and (
            pid.iteration <= state.iteration if pid.iteration else state.logdensity is not None
        )
        answered = answered or recorded(meta, chain, pid) is not None
        answered = answered or any(
            (h.iteration, h.step, pid.epoch) == (pid.iteration, pid.step, state.epoch)
            for h in chain.held
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


def _same_draw(a: FloatArray | None, b: FloatArray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.tobytes() == b.tobytes()


def _draw(
    meta: SessionMeta, i: int, result: Result, iteration: int, step: int
) -> FloatArray | None:
    """The client's draw told for a conditional proposal (``gibbs``), checked: required
    there, with as many finite numbers as the block has coordinates, and a finite log
    density at the point it makes; refused with every other proposal (a told ``draw``
    that is not used would hide a client's mistake)."""
    lookup = meta.sampler.conditional_indices
    indices = None if lookup is None or iteration == 0 else lookup(meta.params, step)
    field = f"results.{i}.draw"
    if indices is None:
        if result.draw is not None:
            raise Invalid(
                f"results[{i}].draw: only a proposal of kind conditional takes a draw",
                field=field,
            )
        return None
    if result.draw is None:
        raise Invalid(
            f"results[{i}].draw: a proposal of kind conditional needs the block's draw from "
            f"its full conditional: a list of {len(indices)} numbers",
            field=field,
        )
    return _vector(meta, i, "draw", result.draw, size=len(indices), what="")


def _nan(dim: int) -> FloatArray:
    out = np.full(dim, math.nan)
    out.flags.writeable = False
    return out


#: The gradient given to a sampler at a point outside the support, where none is used.
_UNUSED: dict[int, FloatArray] = {}


def _vector(
    meta: SessionMeta,
    i: int,
    name: str,
    values: Sequence[Any],
    *,
    size: int | None = None,
    what: str = " where the log density is",
) -> FloatArray:
    """A told list of ``size`` (default ``dim``) finite numbers as an array
    (:class:`Invalid` naming ``results.i.name`` or its offending coordinate otherwise)."""
    field = f"results.{i}.{name}"
    size = meta.dim if size is None else size
    if len(values) != size:
        raise Invalid(
            f"results[{i}].{name} must have {size} values, not {len(values)}", field=field
        )
    if not _NUMBER_TYPES.issuperset(map(type, values)):  # one pass in C; then find it
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise Invalid(f"results[{i}].{name}[{j}] must be a number", field=f"{field}.{j}")
    try:
        vector = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        raise Invalid(f"results[{i}].{name} must be finite", field=field) from None
    bad = np.flatnonzero(~np.isfinite(vector))
    if bad.size:
        raise Invalid(
            f"results[{i}].{name}[{bad[0]}] must be finite{what}",
            field=f"{field}.{bad[0]}",
        )
    vector.flags.writeable = False
    return vector


#: The types of a told vector's entries as JSON gives them (not ``bool``).
_NUMBER_TYPES = frozenset((float, int))


def _in_parts(result: Result) -> bool:
    """Whether ``result`` tells the target as a log prior and a log likelihood."""
    told = result.model_fields_set
    return "log_prior" in told or "log_likelihood" in told


def _required(meta: SessionMeta, i: int, result: Result, name: str, what: str) -> None:
    if name not in result.model_fields_set or getattr(result, name) is None:
        raise Invalid(
            f"results[{i}].{name}: {meta.algorithm} needs {what} at every point",
            field=f"results.{i}.{name}",
        )


def _scaled(power: float, vector: FloatArray) -> FloatArray:
    if power == 1.0:
        return vector
    out = power * vector
    out.flags.writeable = False
    return out


def _parts(meta: SessionMeta, i: int, result: Result) -> Parts:
    """The target's parts told for a minibatch (``sgld``): the log prior and the
    minibatch's log likelihood, each with its gradient, all required except where the
    log prior is -inf (the point is outside the support, and nothing else is used). The
    prior's are raised to the session's ``prior_power``."""
    _required(
        meta,
        i,
        result,
        "log_prior",
        "the log prior density (a number, or -inf outside the support)",
    )
    log_prior = float(result.log_prior)  # type: ignore[arg-type]
    if log_prior == -math.inf:
        unused = _UNUSED.setdefault(meta.dim, _nan(meta.dim))
        return Parts(log_prior, math.nan, unused, unused)
    needs = {
        "log_likelihood": "the minibatch's log likelihood (the sum over its data points)",
        "prior_gradient": f"the log prior's gradient: a list of {meta.dim} numbers",
        "gradient": f"the minibatch log likelihood's gradient: a list of {meta.dim} numbers",
    }
    for name, what in needs.items():
        _required(meta, i, result, name, what)
    assert result.log_likelihood is not None
    assert result.prior_gradient is not None and result.gradient is not None
    power = meta.prior_power
    return Parts(
        power * log_prior,
        float(result.log_likelihood),
        _scaled(power, _vector(meta, i, "prior_gradient", result.prior_gradient)),
        _vector(meta, i, "gradient", result.gradient),
    )


def _sum_of_parts(meta: SessionMeta, i: int, result: Result) -> float:
    """The value of a result told in parts to a sampler of the whole target:
    ``prior_power * log_prior + log_likelihood``, which a told ``log_density`` must
    equal (to a relative 1e-9: the client's sum may round otherwise)."""
    if "log_prior" not in result.model_fields_set:
        raise Invalid(
            f"results[{i}].log_prior: a result that tells log_likelihood needs log_prior too "
            "(a number, or -inf outside the support)",
            field=f"results.{i}.log_prior",
        )
    log_prior = float(result.log_prior)  # type: ignore[arg-type]
    if log_prior == -math.inf:
        value = -math.inf
    elif result.log_likelihood is None:
        raise Invalid(
            f"results[{i}].log_likelihood: a result that tells log_prior needs log_likelihood "
            "too (a finite number; tell log_prior -inf outside the support)",
            field=f"results.{i}.log_likelihood",
        )
    else:
        value = meta.prior_power * log_prior + float(result.log_likelihood)
        if not math.isfinite(value):
            raise Invalid(
                f"results[{i}].log_likelihood: prior_power * log_prior + log_likelihood is "
                "beyond the float range",
                field=f"results.{i}.log_likelihood",
            )
    if "log_density" in result.model_fields_set:
        told = result.log_density
        if not (told == value or abs(told - value) <= 1e-9 * max(1.0, abs(value))):
            raise Invalid(
                f"results[{i}].log_density: {told!r} is not prior_power * log_prior + "
                f"log_likelihood = {value!r}; tell both parts, or leave log_density out",
                field=f"results.{i}.log_density",
            )
    return value


def _value(meta: SessionMeta, i: int, result: Result) -> tuple[float, Parts | None]:
    """The told value, and the target's parts for a sampler told them (``sgld``, whose
    value is the estimate ``log_prior + (N / n) log_likelihood``, and which ignores a
    told ``log_density``). A sampler that needs the parts apart without gradients
    (``tempering`` of the likelihood) takes their sum and the parts
    (:func:`_split`). Every other sampler takes ``log_density``, or
    ``prior_power * log_prior + log_likelihood`` from a result told in parts."""
    needs_parts = meta.sampler.needs_parts
    if needs_parts is not None and needs_parts(meta.params):
        return _split(meta, i, result)
    if not meta.sampler.evaluation.parts:
        if _in_parts(result):
            return _sum_of_parts(meta, i, result), None
        if "log_density" not in result.model_fields_set:
            raise Invalid(
                f"results[{i}].log_density: Field required (the log density at the point, "
                "or log_prior and log_likelihood)",
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


def _split(meta: SessionMeta, i: int, result: Result) -> tuple[float, Parts]:
    """The log prior and log likelihood of a sampler that uses them apart and needs no
    gradient (``tempering`` with ``tempered: "likelihood"``): both required, the value
    checked and summed as for any result told in parts, the prior raised to
    ``prior_power``."""
    if not _in_parts(result):
        raise Invalid(
            f"results[{i}].log_prior: {meta.algorithm} with these options tempers the "
            "likelihood: every result tells log_prior and log_likelihood apart, never "
            "log_density alone",
            field=f"results.{i}.log_prior",
        )
    value = _sum_of_parts(meta, i, result)
    unused = _UNUSED.setdefault(meta.dim, _nan(meta.dim))
    if value == -math.inf:
        return value, Parts(-math.inf, math.nan, unused, unused)
    power = meta.prior_power
    log_prior = power * float(result.log_prior)  # type: ignore[arg-type]
    return value, Parts(log_prior, float(result.log_likelihood), unused, unused)  # type: ignore[arg-type]


def _gradient(meta: SessionMeta, i: int, result: Result, value: float) -> FloatArray | None:
    """The told gradient of the value ``value`` as an array, for a sampler that needs one
    (``None`` for the others, which ignore it); at ``-inf``, where it is not used, it may
    be left out, and the sampler is given NaNs.

    A result told in parts may give the gradients apart too: then ``gradient`` is the log
    likelihood's and ``prior_gradient`` the log prior's, and the sampler is given
    ``prior_power * prior_gradient + gradient``; without ``prior_gradient``, ``gradient``
    is the whole value's (then ``prior_power`` must be 1)."""
    if not meta.sampler.evaluation.gradient:
        return None
    if not math.isfinite(value):  # not used: the point is rejected
        return _UNUSED.setdefault(meta.dim, _nan(meta.dim))
    _required(
        meta,
        i,
        result,
        "gradient",
        f"the gradient of the log density: a list of {meta.dim} numbers",
    )
    assert result.gradient is not None
    gradient = _vector(meta, i, "gradient", result.gradient)
    if result.prior_gradient is not None and _in_parts(result):
        prior = _vector(meta, i, "prior_gradient", result.prior_gradient)
        total = meta.prior_power * prior + gradient
        if not np.all(np.isfinite(total)):
            raise Invalid(
                f"results[{i}].gradient: prior_power * prior_gradient + gradient is beyond "
                "the float range",
                field=f"results.{i}.gradient",
            )
        total.flags.writeable = False
        return total
    if meta.prior_power != 1.0 and _in_parts(result):
        raise Invalid(
            f"results[{i}].prior_gradient: with prior_power {meta.prior_power!r}, a result "
            "told in parts needs the log prior's gradient apart (gradient is then the log "
            "likelihood's)",
            field=f"results.{i}.prior_gradient",
        )
    return gradient


def parse(meta: SessionMeta, results: Sequence[Result]) -> list[Told]:
    """Parse every result before anything is applied (:class:`Invalid` on the first bad
    one)."""
    told = []
    seen: dict[str, int] = {}
    values: list[float] = []
    draws: list[FloatArray | None] = []
    for i, result in enumerate(results):
        value, parts = _value(meta, i, result)
        values.append(value)
        pid = parse_id(result.id)
        if pid is None:
            raise Invalid(
                f"results[{i}].id: {result.id!r} is not a proposal id", field=f"results.{i}.id"
            )
        draw = _draw(meta, i, result, pid.iteration, pid.step)
        draws.append(draw)
        if draw is not None and not value > -math.inf:
            raise Invalid(
                f"results[{i}].log_density: a draw from the full conditional is in the "
                "support: its log density must be a finite number, not -inf or null",
                field=f"results.{i}.log_density",
            )
        first = seen.setdefault(result.id, i)
        if first != i and not (
            _same_value(values[first], value) and _same_draw(draws[first], draw)
        ):
            raise Conflict(
                f"results[{i}].id: {result.id!r} is told twice in this request with different "
                f"values (results[{first}] too); nothing was applied",
                ids=[result.id],
            )
        told.append(Told(i, pid, value, _gradient(meta, i, result, value), parts, draw))
    return told
