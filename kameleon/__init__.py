"""Kameleon: adaptive, gradient-free MCMC over an ask/tell protocol, as a service and in
process.

``kameleon.sample`` samples a Python log density, in process or through a service;
``kameleon.Client`` and ``kameleon.AsyncClient`` speak the whole protocol.
``kameleon.core`` holds the samplers (numpy and scipy only), ``kameleon.service`` the
HTTP service and its stores.

Importing ``kameleon`` is light: each name below is imported when first used.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

# A source checkout keeps core/ and service/ beside this folder, where pyproject.toml's
# package-dir takes them into the wheel as kameleon.core and kameleon.service: they are
# found there too, so that a checkout on the path (PYTHONPATH=<checkout>) imports its own.
if not (Path(__file__).parent / "core").is_dir():
    __path__.append(str(Path(__file__).parent.parent))

try:
    __version__ = version("kameleon")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from kameleon.client import AsyncClient, Client
    from kameleon.core.diagnostics.findings import SamplingWarning
    from kameleon.core.running.inprocess import Interrupted
    from kameleon.errors import (
        BadRequest,
        Conflict,
        Forbidden,
        Invalid,
        KameleonError,
        NotFound,
        PayloadTooLarge,
        Unauthorized,
        Unavailable,
    )
    from kameleon.result import Result
    from kameleon.sampling import sample
    from kameleon.shards import consensus

_LAZY = {
    "AsyncClient": "kameleon.client",
    "Client": "kameleon.client",
    "Interrupted": "kameleon.core.running.inprocess",
    "Result": "kameleon.result",
    "SamplingWarning": "kameleon.core.diagnostics.findings",
    "consensus": "kameleon.shards",
    "sample": "kameleon.sampling",
    **dict.fromkeys(
        (
            "BadRequest",
            "Conflict",
            "Forbidden",
            "Invalid",
            "KameleonError",
            "NotFound",
            "PayloadTooLarge",
            "Unauthorized",
            "Unavailable",
        ),
        "kameleon.errors",
    ),
}

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "Interrupted",
    "Invalid",
    "KameleonError",
    "NotFound",
    "PayloadTooLarge",
    "Result",
    "SamplingWarning",
    "Unauthorized",
    "Unavailable",
    "__version__",
    "consensus",
    "sample",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kameleon' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
