"""A codec between sampler states (frozen dataclasses) and plain JSON-able data.

Nothing is pickled: a state is written as a mapping of its fields, arrays as
base64 of their little-endian bytes (exact, and compact), floats as JSON numbers
(Python's ``repr`` round-trips exactly) except the non-finite ones, which are strings.
Only classes registered with :func:`register` can be decoded, so a document from a
store or a network can name nothing else.

A state class may list ``COLD_FIELDS``: large parts that change rarely (a history
subsample, a surrogate fit). :func:`encode` returns them apart from the small hot part
so that a store can keep them apart and write them only when they change.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from typing import Any, TypeVar

import numpy as np

__all__ = ["SCHEMA_VERSION", "decode", "encode", "from_jsonable", "register", "to_jsonable"]

SCHEMA_VERSION = 1
_REGISTRY: dict[str, type] = {}
T = TypeVar("T")
_DTYPES = {"f8": np.dtype("<f8"), "i8": np.dtype("<i8")}


class CodecError(ValueError):
    """A document is not a valid encoding of a registered state."""


def register(cls: type[T]) -> type[T]:
    """Class decorator: allow ``cls`` (a frozen dataclass) to be encoded and decoded."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError("only dataclasses can be registered")
    name = (
        cls.__qualname__ if cls.__module__ == "__main__" else f"{cls.__module__}.{cls.__qualname__}"
    )
    _REGISTRY[name] = cls
    cls.__codec_name__ = name  # type: ignore[attr-defined]
    cls.__codec_fields__ = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[attr-defined]
    return cls


def _field_names(cls: Any) -> tuple[str, ...]:
    names: tuple[str, ...] | None = cls.__dict__.get("__codec_fields__")
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
    return names


def to_jsonable(value: Any) -> Any:
    """Plain JSON-able data for ``value`` (no NaN or infinity in the output)."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else {"f": repr(value)}
    if value is None or kind is int or kind is bool or kind is str:
        return value
    if kind is np.ndarray:
        code = "i8" if value.dtype.kind in "iu" else "f8"
        data = np.ascontiguousarray(value, dtype=_DTYPES[code]).tobytes()
        return {"a": code, "s": list(value.shape), "b": base64.b64encode(data).decode("ascii")}
    if isinstance(value, np.floating):
        return to_jsonable(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, tuple | list):
        return {"t": [to_jsonable(v) for v in value]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = getattr(type(value), "__codec_name__", None)
        if name is None:
            raise TypeError(f"{type(value).__name__} is not registered with the codec")
        fields = {n: to_jsonable(getattr(value, n)) for n in _field_names(type(value))}
        return {"c": name, "v": fields}
    raise TypeError(f"cannot encode {type(value).__name__}")


def from_jsonable(doc: Any) -> Any:
    """Inverse of :func:`to_jsonable`; raises :class:`CodecError` on anything else."""
    if doc is None or isinstance(doc, bool | int | str):
        return doc
    if isinstance(doc, float):
        return doc
    if isinstance(doc, dict):
        if "f" in doc:
            value = float(doc["f"])
            if math.isfinite(value):
                raise CodecError("finite floats are plain numbers")
            return value
        if "a" in doc:
            try:
                dtype = _DTYPES[doc["a"]]
                shape = tuple(int(n) for n in doc["s"])
                arr = np.frombuffer(base64.b64decode(doc["b"], validate=True), dtype=dtype)
                arr = arr.reshape(shape).copy()
            except (KeyError, ValueError, TypeError) as exc:
                raise CodecError(f"bad array: {exc}") from exc
            arr.flags.writeable = False
            return arr
        if "t" in doc:
            return tuple(from_jsonable(v) for v in doc["t"])
        if "c" in doc:
            cls = _REGISTRY.get(doc["c"])
            if cls is None:
                raise CodecError(f"unknown class {doc['c']!r}")
            try:
                return cls(**{k: from_jsonable(v) for k, v in doc["v"].items()})
            except TypeError as exc:
                raise CodecError(str(exc)) from exc
    raise CodecError(f"cannot decode {type(doc).__name__}")


def cold_fields(cls: Any) -> tuple[str, ...]:
    return tuple(getattr(cls, "COLD_FIELDS", ()))


def encode(state: Any, *, with_cold: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``state`` into ``(hot, cold)`` JSON-able documents.

    ``hot`` carries the schema version and the class; ``cold`` maps each of the class's
    ``COLD_FIELDS`` to its encoding (empty when the class has none, or when
    ``with_cold`` is false: then the cold fields are not encoded at all, which is what a
    writer wants when they did not change).
    """
    name = getattr(type(state), "__codec_name__", None)
    if name is None:
        raise TypeError(f"{type(state).__name__} is not registered with the codec")
    cold_names = cold_fields(type(state))
    hot: dict[str, Any] = {}
    cold: dict[str, Any] = {}
    for field_name in _field_names(type(state)):
        if field_name in cold_names:
            if with_cold:
                cold[field_name] = to_jsonable(getattr(state, field_name))
        else:
            hot[field_name] = to_jsonable(getattr(state, field_name))
    return {"c": name, "v": hot, "schema_version": SCHEMA_VERSION}, cold


def decode(hot: dict[str, Any], cold: dict[str, Any] | None = None) -> Any:
    """Inverse of :func:`encode`."""
    if not isinstance(hot, dict) or hot.get("schema_version") != SCHEMA_VERSION:
        raise CodecError("unsupported schema version")
    fields = dict(hot.get("v", {}))
    fields.update(cold or {})
    return from_jsonable({"c": hot.get("c"), "v": fields})


def cold_changed(old: Any, new: Any) -> bool:
    """Whether ``new``'s cold fields differ from ``old``'s (identity: states share
    unchanged arrays, see :func:`dataclasses.replace`)."""
    if type(old) is not type(new):
        return True
    return any(getattr(old, n) is not getattr(new, n) for n in cold_fields(type(new)))
