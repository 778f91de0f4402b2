"""mypy (strict, as pyproject.toml configures it) on the package as it installs.

The repository keeps ``core/`` and ``service/`` at its root and pyproject.toml's
``package-dir`` maps them into the wheel as ``kameleon.core`` and ``kameleon.service``.
An editable install reaches them through setuptools' import hook, which mypy does not
run, so mypy alone cannot resolve ``kameleon.core``. This script lays the package out as
the wheel does, in ``build/typecheck/kameleon`` (links to the files, made anew each run,
copies where the file system has no links), which pyproject.toml puts on mypy's path
(``mypy_path``), runs mypy, and writes mypy's paths back as the repository's
(``core/...``, ``service/...``, ``kameleon/...``), so that an editor or a terminal opens
the real file.

    .venv/bin/python scripts/typecheck.py [mypy's own arguments]

The exit status is mypy's. Once the tree is there, a plain ``mypy`` (an editor's, say)
resolves the package through it too, with the tree's paths in its messages; the tree
is made again by this script only, so run it after adding a file to ``kameleon/``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
#: Where each part of the installed package comes from (pyproject.toml's package-dir).
MAPPED = {"core": ROOT / "core", "service": ROOT / "service"}


def _link(target: Path, link: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except OSError:  # no symlinks here (Windows without the privilege): a copy
        if target.is_dir():
            shutil.copytree(target, link, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(target, link)


def lay_out() -> Path:
    """``build/typecheck/kameleon``, made anew: the SDK's files, ``core`` and ``service``."""
    package = TREE / "kameleon"
    if TREE.exists():
        shutil.rmtree(TREE)
    package.mkdir(parents=True)
    for item in sorted((ROOT / "kameleon").iterdir()):
        if item.name != "__pycache__":
            _link(item, package / item.name)
    for name, source in MAPPED.items():
        _link(source, package / name)
    return package


#: A file of the tree as mypy prints it: ``build/typecheck/kameleon/...`` (the tree is on
#: mypy's path, pyproject.toml's ``mypy_path``).
_PATH = re.compile(r"(?:\S*/)?build/typecheck/kameleon/(?:(core|service)/)?")


def repository_paths(text: str) -> str:
    """mypy's output with the tree's paths written as the repository's."""
    return _PATH.sub(lambda m: f"{m.group(1)}/" if m.group(1) else "kameleon/", text)


def main(argv: list[str]) -> int:
    lay_out()
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    command = [sys.executable, "-m", "mypy", *argv]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(repository_paths(done.stdout))
    sys.stderr.write(repository_paths(done.stderr))
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
