"""Fast JSON in and out (orjson)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

__all__ = ["JSON", "dumps", "loads"]


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


loads = orjson.loads


class JSON(Response):
    """A JSON response rendered by orjson (numpy arrays included)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)
