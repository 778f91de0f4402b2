"""A codec between sampler states (frozen dataclasses) and plain JSON-able data.

Nothing is pickled or evaluated: a state is written as a mapping of its fields, arrays
as base64 of their little-endian bytes (exact, and compact), floats as JSON numbers
(Python's ``repr`` round-trips exactly) except the non-finite ones, which are strings.
Only classes registered with :func:`register` can be decoded, so a document from a
store or a network can name nothing else.

Each registered class has a stable name of its own, given at registration
(``@register("kameleon.State")``), which is what a document names: a module can be
renamed or moved without making stored documents unreadable. Documents written before
the names were explicit name a class by its module path; :data:`ALIASES` maps those
names to the stable ones, and decoding accepts both.

Decoding checks everything: the keys of each node, the type of each field against the
class's annotations, the shape and size of each array (before allocating it), the depth
of the document. Anything else raises :class:`CodecError`, never another exception.

A state class may list ``COLD_FIELDS``: large parts that change rarely (a history
subsample, a surrogate fit). :func:`core.interface.documents.encode` returns them apart
from the small hot part so that a store can keep them apart and write them only when
they change.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import numpy as np

__all__ = [
    "ALIASES",
    "SCHEMA_VERSION",
    "CodecError",
    "from_jsonable",
    "register",
    "registered",
    "to_jsonable",
]

SCHEMA_VERSION = 1
T = TypeVar("T")
_DTYPES = {"f8": np.dtype("<f8"), "i8": np.dtype("<i8")}
_F8 = _DTYPES["f8"]
#: Deepest nesting of a document (a state is about 4 levels deep).
MAX_DEPTH = 32

Memo: TypeAlias = dict[int, tuple[Any, Any]]
"""Objects encoded, by ``id``: the object (kept alive, so that its ``id`` stays its own)
and its encoding (see :func:`to_jsonable`)."""
#: Most dimensions of an encoded array, and most elements (zero sizes aside).
MAX_NDIM = 8
MAX_ELEMENTS = 2**40

#: The names documents used before each class had a stable one: the module path under
#: the package's two import names (``core...`` before the distribution installed one
#: package, ``kameleon.core...`` after).
ALIASES: dict[str, str] = {
    f"{prefix}{old}": new
    for prefix in ("core.", "kameleon.core.")
    for old, new in {
        "samplers.rwm.State": "rwm.State",
        "samplers.am.State": "am.State",
        "samplers.kameleon.State": "kameleon.State",
        "samplers.kmc_lite.State": "kmc-lite.State",
        "samplers.kmc_finite.State": "kmc-finite.State",
        "adaptation.Welford": "adaptation.Welford",
        "preconditioning.Preconditioner": "preconditioning.Preconditioner",
    }.items()
}

_REGISTRY: dict[str, type] = {}
#: Each registered class's stable name and field names, by class (the encoder's lookup).
_ENCODED: dict[type, tuple[str, tuple[str, ...]]] = {}
_CHECKERS: dict[type, dict[str, Callable[[Any], bool]]] = {}


class CodecError(ValueError):
    """A document is not a valid encoding of a registered state."""


def register(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: allow the frozen dataclass to be encoded and decoded under the
    stable ``name`` (never change it once documents with it may be stored)."""

    def decorate(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError("only dataclasses can be registered")
        taken = _REGISTRY.get(name)
        if name in ALIASES or (taken is not None and _path(taken) != _path(cls)):
            raise ValueError(f"codec name {name!r} is already taken")
        _REGISTRY[name] = cls
        cls.__codec_name__ = name  # type: ignore[attr-defined]
        cls.__codec_fields__ = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[attr-defined]
        _ENCODED[cls] = (name, cls.__codec_fields__)  # type: ignore[attr-defined]
        return cls

    return decorate


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def registered() -> dict[str, type]:
    """The registered classes by their stable names."""
    return dict(_REGISTRY)


def _field_names(cls: Any) -> tuple[str, ...]:
    names: tuple[str, ...] | None = cls.__dict__.get("__codec_fields__")
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
    return names


# --------------------------------------------------------------------------- encode


def to_jsonable(value: Any, memo: Memo | None = None, kept: Memo | None = None) -> Any:
    """Plain JSON-able data for ``value`` (no NaN or infinity in the output).

    ``memo``, kept by the caller for one document, maps the ``id`` of each array and
    dataclass already encoded to the object and its encoding, which is given again where
    the same object appears again (a tree's points are often one object named several
    times): the document is the same, written once. ``kept`` is the ``memo`` of an earlier
    document, of a state that shares objects with this one (the state before a
    transition): an object found there *by identity* is not encoded again. Both hold the
    objects they name, so an ``id`` cannot stand for another object; they are only for
    objects that never change (frozen dataclasses, read-only arrays): an array that is
    writeable is never taken from ``kept``."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else {"f": repr(value)}
    if value is None or kind is int or kind is bool or kind is str:
        return value
    if kind is np.ndarray:
        if memo is not None:
            key = id(value)
            if (seen := memo.get(key)) is not None:
                return seen[1]
            if (
                kept is not None
                and (seen := kept.get(key)) is not None
                and seen[0] is value
                and not value.flags.writeable
            ):
                memo[key] = seen
                return seen[1]
        dtype = value.dtype
        if dtype == _F8:
            code, data = "f8", value.tobytes()  # C order, whatever the layout
        else:
            code = "i8" if dtype.kind in "iu" else "f8"
            data = np.ascontiguousarray(value, dtype=_DTYPES[code]).tobytes()
        text = binascii.b2a_base64(data, newline=False).decode("ascii")
        out: dict[str, Any] = {"a": code, "s": list(value.shape), "b": text}
        if memo is not None:
            memo[id(value)] = (value, out)
        return out
    registered = _ENCODED.get(kind)
    if registered is not None:
        if memo is not None:
            key = id(value)
            if (seen := memo.get(key)) is not None:
                return seen[1]
            if kept is not None and (seen := kept.get(key)) is not None and seen[0] is value:
                # A frozen dataclass: every object under it is the same as when ``kept``
                # was written (states share what a transition did not change, and never
                # change it), so its encoding is.
                memo[key] = seen
                return seen[1]
        name, names = registered
        fields: dict[str, Any] = {}
        for n in names:
            v = getattr(value, n)
            k = type(v)
            # A scalar field is written as is, without a call (the same document).
            if (k is float and math.isfinite(v)) or v is None or k is int or k is bool or k is str:
                fields[n] = v
            else:
                fields[n] = to_jsonable(v, memo, kept)
        doc = {"c": name, "v": fields}
        if memo is not None:
            memo[id(value)] = (value, doc)
        return doc
    if kind is tuple or kind is list:
        return {"t": [to_jsonable(v, memo, kept) for v in value]}
    if isinstance(value, np.floating):
        return to_jsonable(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, tuple | list):
        return {"t": [to_jsonable(v, memo, kept) for v in value]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        raise TypeError(f"{type(value).__name__} is not registered with the codec")
    raise TypeError(f"cannot encode {type(value).__name__}")


# --------------------------------------------------------------------------- decode

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def from_jsonable(doc: Any) -> Any:
    """Inverse of :func:`to_jsonable`; raises :class:`CodecError` on anything else."""
    return _decode(doc, 0)


def _decode(doc: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise CodecError("document nested too deeply")
    if doc is None or isinstance(doc, bool | int | str):
        return doc
    if isinstance(doc, float):
        if not math.isfinite(doc):
            raise CodecError("non-finite floats are written as strings")
        return doc
    if not isinstance(doc, dict):
        raise CodecError(f"cannot decode {type(doc).__name__}")
    keys = set(doc)
    if keys == {"f"}:
        value = _NON_FINITE.get(doc["f"]) if isinstance(doc["f"], str) else None
        if value is None:
            raise CodecError("finite floats are plain numbers; others are 'inf', '-inf', 'nan'")
        return value
    if keys == {"a", "s", "b"}:
        return _decode_array(doc)
    if keys == {"t"}:
        if not isinstance(doc["t"], list):
            raise CodecError("a tuple is a list")
        return tuple(_decode(v, depth + 1) for v in doc["t"])
    if keys == {"c", "v"}:
        return _decode_object(doc["c"], doc["v"], depth)
    raise CodecError(f"unknown node with keys {sorted(map(str, keys))}")


def _decode_array(doc: dict[str, Any]) -> Any:
    dtype = _DTYPES.get(doc["a"]) if isinstance(doc["a"], str) else None
    if dtype is None:
        raise CodecError("bad array: unknown dtype")
    shape = doc["s"]
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(n) is int and n >= 0 for n in shape)
        or math.prod(max(n, 1) for n in shape) > MAX_ELEMENTS
    ):
        raise CodecError(
            f"bad array: the shape is at most {MAX_NDIM} sizes >= 0, {MAX_ELEMENTS} elements"
        )
    data = doc["b"]
    if not isinstance(data, str):
        raise CodecError("bad array: the data is a base64 string")
    # Check the size before decoding anything: a shape of 10^12 elements must not
    # allocate, and the base64 length fixes the byte count.
    nbytes = math.prod(shape) * dtype.itemsize
    if len(data) != 4 * ((nbytes + 2) // 3):
        raise CodecError("bad array: the data does not match the shape")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CodecError(f"bad array: {exc}") from None
    if len(raw) != nbytes:
        raise CodecError("bad array: the data does not match the shape")
    try:
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    except ValueError as exc:  # pragma: no cover - the checks above leave none
        raise CodecError(f"bad array: {exc}") from None
    arr.flags.writeable = False
    return arr


def _decode_object(name: Any, values: Any, depth: int) -> Any:
    if not isinstance(name, str):
        raise CodecError("a class name is a string")
    cls = _REGISTRY.get(ALIASES.get(name, name))
    if cls is None:
        raise CodecError(f"unknown class {name!r}")
    if not isinstance(values, dict):
        raise CodecError(f"{name}: the fields are a mapping")
    checkers = _checkers(cls)
    # A field added later with a default may be missing from a document written before.
    optional = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    missing = sorted(set(checkers) - set(values) - optional)
    extra = sorted(map(str, set(values) - set(checkers)))
    if missing or extra:
        raise CodecError(f"{name}: missing fields {missing}, unknown fields {extra}")
    fields = {}
    for field_name, check in checkers.items():
        if field_name not in values:
            continue  # its default
        value = _decode(values[field_name], depth + 1)
        if not check(value):
            raise CodecError(f"{name}: field {field_name} has the wrong type")
        fields[field_name] = value
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"{name}: {exc}") from None


def _checkers(cls: type) -> dict[str, Callable[[Any], bool]]:
    """One type check per field of ``cls``, from its annotations (cached)."""
    checkers = _CHECKERS.get(cls)
    if checkers is None:
        hints = typing.get_type_hints(cls)
        checkers = {f.name: _checker(hints[f.name]) for f in dataclasses.fields(cls)}
        _CHECKERS[cls] = checkers
    return checkers


def _checker(annotation: Any) -> Callable[[Any], bool]:
    """Whether a decoded value fits ``annotation``; ``TypeError`` for an annotation the
    codec does not know (a registered class must use only these)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [_checker(arg) for arg in typing.get_args(annotation)]
        return lambda v: any(check(v) for check in options)
    if annotation is type(None):
        return lambda v: v is None
    if annotation is int:
        return lambda v: type(v) is int
    if annotation is float:
        # Written as floats; an integer-valued float field of an old writer reads back
        # as an int, which is the same number.
        return lambda v: type(v) is float or type(v) is int
    if annotation is bool:
        return lambda v: type(v) is bool
    if annotation is str:
        return lambda v: type(v) is str
    if origin is np.ndarray:
        dtype_arg = typing.get_args(typing.get_args(annotation)[1])[0]
        dtype = np.dtype(dtype_arg)
        return lambda v: type(v) is np.ndarray and v.dtype == dtype
    if isinstance(annotation, type) and getattr(annotation, "__codec_name__", None):
        return lambda v: type(v) is annotation
    raise TypeError(f"the codec cannot check values of type {annotation!r}")
