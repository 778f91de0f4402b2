"""Each algorithm's options as a JSON Schema, read off its ``Params`` dataclass.

The samplers declare their options once, in ``core``: a frozen dataclass whose fields
are the options (with their types and defaults) and whose numpy-style docstring says
what each one does. This module turns that into the per-algorithm schemas of the OpenAPI
document, so the contract a client reads and the parser that checks a request
(:func:`kameleon.core.interface.options.parse_params`) cannot drift apart. Range checks stay in the
dataclasses; the schema states types, defaults, allowed values and descriptions.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from typing import Any, Literal

from kameleon.service.core_api import Sampler

__all__ = ["FIXED", "document_options", "option_docs", "options_schema", "schema_name"]

#: Fields of ``Params`` that the session sets, not the options.
FIXED = frozenset({"dim", "warmup"})

_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`")


def schema_name(algorithm: str) -> str:
    """``"kmc-lite"`` -> ``"KmcLiteOptions"``."""
    return "".join(part.capitalize() for part in re.split(r"[-_]", algorithm)) + "Options"


def _markdown(text: str) -> str:
    """reStructuredText roles and literals as Markdown code spans."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def option_docs(cls: type) -> dict[str, str]:
    """Each attribute's text in the ``Attributes`` sections of ``cls`` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        lines = doc.splitlines()
        try:
            start = lines.index("Attributes") + 2  # the title and its underline
        except ValueError:
            continue
        name: str | None = None
        text: list[str] = []
        for line in [*lines[start:], ""]:
            if line and not line.startswith(" "):
                _put(docs, name, text)
                name, text = line.strip(), []
            elif line.strip():
                text.append(line.strip())
            elif name:
                _put(docs, name, text)
                name, text = None, []
    return docs


def _put(docs: dict[str, str], names: str | None, text: list[str]) -> None:
    """One entry may document several attributes: ``num_steps_min, num_steps_max``."""
    for name in (names or "").split(","):
        if name.strip():
            docs[name.strip()] = _markdown(" ".join(text))


def _type_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return {"type": "array", "items": _type_schema(typing.get_args(annotation)[0])}
    if dataclasses.is_dataclass(annotation):
        return _record_schema(annotation)  # type: ignore[arg-type]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        (only,) = args  # options are T or T | None
        return {"anyOf": [_type_schema(only), {"type": "null"}]}
    if origin is Literal:
        return {"type": "string", "enum": list(typing.get_args(annotation))}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return {"type": simple[annotation]}


def _record_schema(cls: type) -> dict[str, Any]:
    """An object option (a frozen dataclass of its own, as ``gibbs``'s blocks): its
    fields, their defaults and their docstring entries; those without a default are
    required."""
    hints = typing.get_type_hints(cls)
    docs = option_docs(cls)
    properties: dict[str, Any] = {}
    required = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        prop = _type_schema(hints[field.name])
        if field.default is not dataclasses.MISSING:
            prop["default"] = field.default
        else:
            required.append(field.name)
        prop["description"] = docs.get(field.name, "")
        properties[field.name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


def options_schema(algorithm: str, sampler: Sampler[Any, Any]) -> dict[str, Any]:
    """The JSON Schema of ``algorithm``'s ``options`` object."""
    cls = sampler.Params
    hints = typing.get_type_hints(cls)
    docs = option_docs(cls)
    properties: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.name in FIXED:
            continue
        prop = _type_schema(hints[field.name])
        if field.default is not dataclasses.MISSING:
            prop["default"] = field.default
        prop["description"] = docs.get(field.name, "")
        properties[field.name] = prop
    summary = re.split(r"[:.]", inspect.cleandoc(cls.__doc__ or ""), maxsplit=1)[0]
    return {
        "title": schema_name(algorithm),
        "description": f"`options` of `{algorithm}`: {summary}. Every option has a default; "
        "an unknown option, or a value of the wrong type or out of range, is a 422 that "
        "names it.",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def document_options(
    spec: dict[str, Any], samplers: dict[str, Sampler[Any, Any]], default: str
) -> None:
    """Add each algorithm's options schema to an OpenAPI document, and tie
    ``SessionCreate.options`` to the one of the session's ``algorithm`` (without
    ``algorithm``, the default algorithm's).

    One ``anyOf`` with a branch per algorithm, each naming its ``algorithm`` and its
    options: JSON Schema's ``if``/``then`` says the same, but a generator of test
    requests (schemathesis, through hypothesis-jsonschema) expands an ``allOf`` of them
    into every combination of branches, which it gave up on past six algorithms."""
    schemas = spec["components"]["schemas"]
    branches: list[dict[str, Any]] = []
    for algorithm, sampler in samplers.items():
        name = schema_name(algorithm)
        schemas[name] = options_schema(algorithm, sampler)
        ref = {"$ref": f"#/components/schemas/{name}"}
        branches.append(
            {
                "properties": {"algorithm": {"const": algorithm}, "options": ref},
                "required": ["algorithm"],
            }
        )
        if algorithm == default:
            branches.append({"not": {"required": ["algorithm"]}, "properties": {"options": ref}})
    create = schemas["SessionCreate"]
    create["properties"]["options"] = {
        "type": "object",
        "title": "Options",
        "default": {},
        "description": "The algorithm's options, each with a documented default: "
        + ", ".join(f"`{a}`: {schema_name(a)}" for a in samplers)
        + ".",
    }
    create["anyOf"] = branches
