"""The types every body shares: strict numbers, names, log densities, and the base of
request models (unknown fields are refused)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
)

from kameleon.service.core_api import SAMPLERS

ALGORITHMS = tuple(SAMPLERS)
Finite = Annotated[float, Strict(), AllowInfNan(False)]
Count = Annotated[int, Strict()]
#: Largest count a JSON number represents exactly, whatever the client's language.
MAX_COUNT = 2**53
#: Most starting points a session may draw per chain.
MAX_INITIAL_ATTEMPTS = 10_000


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_utf8)]


def _outside_support(value: Any) -> Any:
    """``null``, ``"-inf"`` and ``"-Infinity"`` mean a point outside the support."""
    if value is None or value in ("-inf", "-Infinity"):
        return -math.inf
    return value


def _not_nan_or_plus_inf(value: float) -> float:
    if math.isnan(value) or value == math.inf:
        raise ValueError("log density must be a number, -Infinity, '-inf' or null; not NaN or +inf")
    return value


LogDensity = Annotated[
    float,
    BeforeValidator(
        _outside_support,
        json_schema_input_type=float | Literal["-inf", "-Infinity"] | None,
    ),
    Strict(),
    AfterValidator(_not_nan_or_plus_inf),
    Field(
        description="log density (or log of an unbiased estimate) at the proposal; "
        "-Infinity, '-inf' or null outside the support. NaN and +inf are errors."
    ),
]


def one_row(value: Any) -> Any:
    """A flat list of numbers as ``initial`` is one row, for every chain."""
    if isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
        return [value]
    return value


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
