"""docs/walkthrough.md: a newcomer who follows it sends the key of its first step with
every later command (its export step once failed with 401 for want of it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_after_the_key_is_set_up_sends_it() -> None:
    text = (ROOT / "docs" / "walkthrough.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    exported = next(i for i, b in enumerate(blocks) if "export KAMELEON_API_KEY=" in b)
    assert "export KAMELEON_URL=" in blocks[exported]
    first_key = next(i for i, b in enumerate(blocks) if "hash-key" in b)
    assert first_key <= exported
    for block in blocks[exported + 1 :]:
        for line in block.splitlines():
            if re.search(r"\bcurl -", line) and "/v1/" in block:
                assert "$KEY" in block, block  # curl sends it as X-API-Key
            if re.match(r"\s*(\.venv/bin/)?kameleon (export|sessions)", line):
                assert "--url http" not in line or "--api-key" in line, line


def test_the_gradient_section_names_what_the_clients_have() -> None:
    """Its C signature is the one of the C library's gradient functions, its command the
    one tests/clients runs (the C client on nuts), and what it names exists."""
    text = (ROOT / "docs" / "walkthrough.md").read_text()
    section = text[text.index("### If your code gives the gradient") :]
    section = section[: section.index("\n## ")]
    header = (ROOT / "clients" / "c" / "kameleon_client.h").read_text()
    banana = (ROOT / "clients" / "c" / "banana.c").read_text()
    fortran = (ROOT / "clients" / "fortran" / "banana.f90").read_text()
    signature = re.search(r"static double log_density_gradient\((.*?)\);", section)
    assert signature and f"log_density_gradient({signature[1]}) {{" in banana
    assert (
        "typedef double (*kc_log_density_gradient)(const double *x, int dim, double *gradient,"
        in header
    )
    for name in ("kc_run_workers_gradient", "kc_work_gradient"):
        assert name in section and f"int {name}(" in header, name
    assert "function log_density_gradient(y, dim, gradient, data)" in fortran
    command = next(b for b in re.findall(r"```sh\n(.*?)```", section, re.S) if "banana" in b)
    assert "make -C clients/c\n" in command and "KAMELEON_ALGORITHM=nuts" in command
    from tests.clients.test_clients import GRADIENT_RUNS

    assert GRADIENT_RUNS["c"] == ("nuts", 8, 200, 200)
    for setting, value in zip(
        ("CHAINS", "WARMUP", "ITERATIONS"), GRADIENT_RUNS["c"][1:], strict=True
    ):
        assert f"KAMELEON_{setting}={value}" in command, setting
