"""The cross-references in core's docstrings name things that exist."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pathlib
import re
from types import ModuleType
from typing import Any

import pytest

import kameleon.core

CORE = pathlib.Path(kameleon.core.__file__).resolve().parent
MODULES = sorted(
    "kameleon.core." + ".".join(p.relative_to(CORE).with_suffix("").parts)
    for p in CORE.rglob("*.py")
    if p.name != "__init__.py"
)
ROLE = re.compile(r":(?:func|mod|class|data|meth|attr|exc):`~?([A-Za-z_][\w.]*)`")


def _lookup(root: Any, names: list[str]) -> bool:
    obj = root
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _resolves(target: str, module: ModuleType) -> bool:
    parts = target.split(".")
    if parts[0] == "core":  # the docstrings name core's modules without the package
        parts = ["kameleon", *parts]
    for split in range(len(parts), 0, -1):  # the longest importable prefix
        try:
            root = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        if _lookup(root, parts[split:]):
            return True
        break
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)]
    return any(_lookup(scope, target.split(".")) for scope in [module, builtins, *classes])


@pytest.mark.parametrize("name", MODULES)
def test_every_cross_reference_resolves(name: str) -> None:
    module = importlib.import_module(name)
    source = inspect.getsource(module)
    unresolved = [t for t in ROLE.findall(source) if not _resolves(t, module)]
    assert not unresolved, unresolved
