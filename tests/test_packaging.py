"""The distribution installs one top-level name, ``kameleon``, with its console script.

The repository keeps ``core/`` and ``service/`` at its root and pyproject.toml's
``package-dir`` maps them into ``kameleon``; this builds the wheel and installs it, without
dependencies, into a fresh virtual environment, and looks at what the install added to
site-packages; and checks what the mapping asks of the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_the_wheel_installs_kameleon_and_nothing_else(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT))
    (wheel,) = tmp_path.glob("kameleon-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"kameleon"}
    assert "kameleon/service/store/apply.lua" in names
    assert "kameleon/core/samplers/am.py" in names
    # The dashboard's files, its plotting library and that library's license.
    for name in ("index.html", "session.js", "dashboard.css", "vendor/uPlot.iife.min.js"):
        assert f"kameleon/service/static/ui/{name}" in names
    assert "kameleon/service/static/ui/vendor/uPlot-LICENSE" in names
    # Every module of core/ and service/, at its mapped place.
    for folder in ("core", "service"):
        for source in (ROOT / folder).rglob("*.py"):
            assert f"kameleon/{source.relative_to(ROOT).as_posix()}" in names, source

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    purelib = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    before = {p.name for p in purelib.iterdir()}
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel))
    added = {p.name for p in purelib.iterdir()} - before
    assert {n for n in added if not n.endswith(".dist-info")} == {"kameleon"}
    assert (env_dir / "bin" / "kameleon").exists()
    assert _run(python, "-c", "import kameleon; print(kameleon.__name__)") == "kameleon"


def _listed() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def test_every_folder_with_modules_is_a_listed_package() -> None:
    # package-dir maps core/ and service/ in, and the packages are listed by name: a new
    # folder missing from the list would be left out of the wheel, silently.
    folders = {"kameleon"}
    for top in ("core", "service"):
        for source in (ROOT / top).rglob("*.py"):
            folders.add("kameleon." + ".".join(source.parent.relative_to(ROOT).parts))
    assert _listed() == folders


def test_a_checkout_on_the_path_imports_its_own_core(tmp_path: Path) -> None:
    # The side-by-side benchmarks import another checkout with PYTHONPATH=<checkout>:
    # its kameleon.core must be that checkout's, not the installed one's.
    other = tmp_path / "checkout"
    (other / "kameleon").mkdir(parents=True)
    (other / "core").mkdir()
    (other / "kameleon" / "__init__.py").write_text((ROOT / "kameleon" / "__init__.py").read_text())
    (other / "core" / "__init__.py").write_text("WHICH = 'the other checkout'\n")
    env = {**os.environ, "PYTHONPATH": str(other)}
    code = "import kameleon.core; print(kameleon.core.WHICH)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "the other checkout", out.stderr


def test_the_type_check_prints_the_repository_paths() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import typecheck
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    text = (
        "build/typecheck/kameleon/core/numerics/rng.py:1: error: x\n"
        "/abs/build/typecheck/kameleon/service/app.py:2: note: y\n"
        "build/typecheck/kameleon/cli.py:3: error: z (see build/typecheck/kameleon/aio.py)\n"
    )
    assert typecheck.repository_paths(text) == (
        "core/numerics/rng.py:1: error: x\n"
        "service/app.py:2: note: y\n"
        "kameleon/cli.py:3: error: z (see kameleon/aio.py)\n"
    )
