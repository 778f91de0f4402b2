"""The OpenAPI document of the app, rendered as the YAML committed at ``openapi.yaml``.

Regenerate it with ``kameleon openapi -o openapi.yaml``; a test fails when the file and
the app differ.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from kameleon.service.app import create_app
from kameleon.service.config import Settings

__all__ = ["document", "render"]


def document() -> dict[str, Any]:
    """The app's OpenAPI document as plain data (key order normalised)."""
    spec = create_app(Settings()).openapi()
    normalised: dict[str, Any] = json.loads(json.dumps(spec, sort_keys=True))
    return normalised


def render() -> str:
    """The document as YAML."""
    return yaml.safe_dump(document(), sort_keys=False, allow_unicode=True, width=100)
