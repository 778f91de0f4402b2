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
