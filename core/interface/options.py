"""Sampler options: a frozen ``Params`` dataclass per sampler, filled from user options.

A sampler declares its options once, as the fields of its ``Params`` dataclass (types and
defaults) with a numpy-style ``Attributes`` docstring; :func:`parse_params` fills it from
a plain mapping (a request's JSON), refusing unknown options and wrong types with
:class:`OptionError`, and the dataclass's ``__post_init__`` checks ranges. The service's
OpenAPI document is generated from the same dataclasses.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar

__all__ = [
    "MAX_OPTION_INT",
    "MakeParams",
    "OptionError",
    "describe_params",
    "params_parser",
    "parse_params",
]

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class OptionError(ValueError):
    """An option is unknown, has the wrong type, or is out of range."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


class MakeParams(Protocol[P_co]):
    """``make_params(dim, options, *, warmup) -> Params`` (see :func:`params_parser`)."""

    def __call__(self, dim: int, options: Mapping[str, Any], *, warmup: int) -> P_co: ...


#: Largest integer option: exact in a JSON number in any language.
MAX_OPTION_INT = 2**53


def _check_type(name: str, value: Any, annotation: Any) -> Any:
    """Coerce ``value`` to ``annotation`` (bool, int, float, str, Literal, Optional; a
    list as ``tuple[T, ...]``; an object as a frozen dataclass, :func:`_check_record`).
    A nested value's errors name it by its path: ``blocks.1.indices.0``."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        (item, ellipsis) = typing.get_args(annotation)
        assert ellipsis is Ellipsis, "options are tuples of one type"
        if not isinstance(value, list | tuple):
            raise OptionError(name, "must be a list")
        return tuple(_check_type(f"{name}.{i}", v, item) for i, v in enumerate(value))
    if dataclasses.is_dataclass(annotation):
        return _check_record(name, value, annotation)  # type: ignore[arg-type]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:  # T | None: T's own error, naming a nested value by its path
            return _check_type(name, value, options[0])
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(name, value, arg)
            except OptionError as exc:
                errors.append(exc.message)
        raise OptionError(name, "; ".join(errors))
    if origin is Literal:
        allowed = typing.get_args(annotation)
        if value not in allowed:
            raise OptionError(name, f"must be one of {list(allowed)}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise OptionError(name, "must be a boolean")
        return value
    if annotation is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(name, "must be an integer")
        if abs(value) > MAX_OPTION_INT:
            raise OptionError(name, f"must be at most {MAX_OPTION_INT} in magnitude")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OptionError(name, "must be a number")
        value = float(value)
        if not math.isfinite(value):
            raise OptionError(name, "must be finite")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise OptionError(name, "must be a string")
        return value
    raise OptionError(name, f"unsupported option type {annotation!r}")  # pragma: no cover


def _check_record(name: str, value: Any, cls: type) -> Any:
    """An object of options as the frozen dataclass ``cls`` (its fields with defaults may
    be left out; unknown keys are refused). Its ``__post_init__`` may raise
    :class:`OptionError` naming a field, which is then named by its path."""
    if not isinstance(value, Mapping):
        raise OptionError(name, "must be an object")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - known)
    if unknown:
        raise OptionError(
            f"{name}.{unknown[0]}", f"unknown field; known fields are {sorted(known)}"
        )
    values = {k: _check_type(f"{name}.{k}", v, hints[k]) for k, v in value.items()}
    try:
        return cls(**values)
    except OptionError as exc:
        raise OptionError(f"{name}.{exc.option}", exc.message) from None
    except TypeError:  # a required field left out
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.name not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        raise OptionError(f"{name}.{missing[0]}" if missing else name, "is required") from None


def parse_params(cls: type, options: Mapping[str, Any], **fixed: Any) -> Any:
    """Build the frozen ``Params`` dataclass ``cls`` from user ``options``.

    ``fixed`` are values set by the session, not by options (``dim``, ``warmup``).
    Unknown options and options of the wrong type raise :class:`OptionError`; range
    checks live in the dataclass's ``__post_init__``, which raises ``OptionError`` too.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    settable = set(fields) - set(fixed)
    unknown = sorted(set(options) - settable)
    if unknown:
        raise OptionError(unknown[0], f"unknown option; known options are {sorted(settable)}")
    values = {name: _check_type(name, value, hints[name]) for name, value in options.items()}
    return cls(**values, **fixed)


def params_parser(cls: type[P]) -> MakeParams[P]:
    """A sampler's ``make_params`` for its ``Params`` dataclass ``cls``: the session fixes
    ``dim`` and ``warmup``, the user's options set the rest (:func:`parse_params`)."""

    def make_params(dim: int, options: Mapping[str, Any], *, warmup: int) -> P:
        return parse_params(cls, options, dim=dim, warmup=warmup)  # type: ignore[no-any-return]

    make_params.__doc__ = f"Validated :class:`{cls.__qualname__}` for a chain of dimension ``dim``."
    return make_params


def describe_params(cls: type, **fixed: Any) -> dict[str, Any]:
    """The options of ``cls`` with their defaults (for documentation and summaries)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in fixed or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out
