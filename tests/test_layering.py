"""core/ is a library: it imports nothing from service/, FastAPI, pydantic or Redis."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = (
    "kameleon.service",
    "fastapi",
    "pydantic",
    "pydantic_settings",
    "redis",
    "starlette",
    "uvicorn",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_top(node.module))
    return names


def _top(module: str) -> str:
    """The package an import names: its first component, or the first two under
    ``kameleon`` (``kameleon.core``, ``kameleon.service``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "kameleon" else parts[0]


def test_core_sources_import_nothing_forbidden() -> None:
    files = sorted((ROOT / "core").rglob("*.py"))
    assert files, "no core sources found"
    offenders = {
        str(f.relative_to(ROOT)): sorted(_imports(f) & set(FORBIDDEN))
        for f in files
        if _imports(f) & set(FORBIDDEN)
    }
    assert offenders == {}


def test_importing_core_loads_nothing_forbidden() -> None:
    """Also at run time: importing every core module pulls in none of them."""
    code = (
        "import importlib, pkgutil, sys, kameleon.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'kameleon.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "top = lambda n: '.'.join(n.split('.')[:2]) if n.startswith('kameleon.') else n.split('.')[0]\n"
        f"bad = sorted(n for n in sys.modules if top(n) in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


#: The one module under service/ that imports core: the service's door into it.
CORE_DOOR = "service/core_api.py"


def _imports_core(path: Path) -> bool:
    """Whether ``path`` imports anything of ``kameleon.core``, at any depth of its
    code (a function's own import too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        else:
            continue
        if any(_top(m) == "kameleon.core" for m in modules):
            return True
    return False


def test_one_service_module_imports_core() -> None:
    """Everything the service uses of core comes through one module."""
    files = sorted((ROOT / "service").rglob("*.py"))
    assert files, "no service sources found"
    importers = [str(f.relative_to(ROOT)) for f in files if _imports_core(f)]
    assert importers == [CORE_DOOR]
