"""A chain's state as a store keeps it: :func:`encode` splits a registered state into a
small hot document (the schema version, the class's stable name, the fields that change
every transition) and its cold fields (``COLD_FIELDS``: large parts that change rarely,
written only when :func:`cold_changed`), and :func:`decode` joins them again. The values
themselves are encoded by :mod:`core.interface.codec`.
"""

from __future__ import annotations

import math
from typing import Any

from kameleon.core.interface.codec import (
    SCHEMA_VERSION,
    CodecError,
    Memo,
    _field_names,
    from_jsonable,
    to_jsonable,
)

__all__ = ["cold_changed", "decode", "encode"]


def cold_fields(cls: Any) -> tuple[str, ...]:
    names: tuple[str, ...] = getattr(cls, "COLD_FIELDS", ())
    return names


def encode(
    state: Any, *, with_cold: bool = True, memo: Memo | None = None, kept: Memo | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``state`` into ``(hot, cold)`` JSON-able documents.

    ``hot`` carries the schema version and the class; ``cold`` maps each of the class's
    ``COLD_FIELDS`` to its encoding (empty when the class has none, or when
    ``with_cold`` is false: then the cold fields are not encoded at all, which is what a
    writer wants when they did not change).

    A writer that keeps its states may give ``memo``, an empty mapping that is filled
    with the objects of ``state`` and their encodings, and ``kept``, the ``memo`` of the
    state it writes over: what the two states share is not encoded again (the
    documents are the same, see :func:`to_jsonable`).
    """
    name = getattr(type(state), "__codec_name__", None)
    if name is None:
        raise TypeError(f"{type(state).__name__} is not registered with the codec")
    cold_names = cold_fields(type(state))
    hot: dict[str, Any] = {}
    cold: dict[str, Any] = {}
    if memo is None:
        memo = {}  # the state holds every object named in it meanwhile
    for field_name in _field_names(type(state)):
        if field_name in cold_names:
            if with_cold:
                cold[field_name] = to_jsonable(getattr(state, field_name), memo, kept)
            continue
        v = getattr(state, field_name)
        k = type(v)
        if (k is float and math.isfinite(v)) or v is None or k is int or k is bool or k is str:
            hot[field_name] = v  # as to_jsonable writes it, without the call
        else:
            hot[field_name] = to_jsonable(v, memo, kept)
    return {"c": name, "v": hot, "schema_version": SCHEMA_VERSION}, cold


def decode(hot: Any, cold: Any = None) -> Any:
    """Inverse of :func:`encode`. Keys of ``hot`` other than ``c``, ``v`` and
    ``schema_version`` are left to the caller (a store may keep marks of its own there)."""
    version = hot.get("schema_version") if isinstance(hot, dict) else None
    if type(version) is not int or version != SCHEMA_VERSION:
        raise CodecError("unsupported schema version")
    values, cold = hot.get("v"), {} if cold is None else cold
    if not isinstance(values, dict) or not isinstance(cold, dict):
        raise CodecError("the fields are a mapping")
    overlap = set(values) & set(cold)
    if overlap:
        raise CodecError(f"fields both hot and cold: {sorted(map(str, overlap))}")
    return from_jsonable({"c": hot.get("c"), "v": {**values, **cold}})


def cold_changed(old: Any, new: Any) -> bool:
    """Whether ``new``'s cold fields differ from ``old``'s (identity: states share
    unchanged arrays, see :func:`dataclasses.replace`)."""
    if type(old) is not type(new):
        return True
    return any(getattr(old, name) is not getattr(new, name) for name in cold_fields(type(new)))
