"""The distribution installs one top-level name, ``kameleon``, with its console script.

The repository keeps ``core/`` and ``service/`` at its root and links them under
``kameleon/``; this builds the wheel and installs it, without dependencies, into a fresh
virtual environment, and looks at what the install added to site-packages.
"""

from __future__ import annotations

import subprocess
import sys
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
