"""What the use cases refuse, in their own terms; the HTTP edge (``service.problems``)
turns each into its status and problem type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "Busy",
    "Conflict",
    "Invalid",
    "NotFound",
    "Quota",
    "SamplerFailed",
    "ServiceError",
    "guarded",
]

T = TypeVar("T")


class ServiceError(Exception):
    """A request the service refuses; ``extra`` names what it concerns (``field``,
    ``ids``), and goes into the error body as it is."""

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class NotFound(ServiceError):
    """No such session (or it belongs to another owner), or no such chain in it."""


class Invalid(ServiceError):
    """Well-formed but invalid input; ``field`` names it. Nothing was changed."""


class Conflict(ServiceError):
    """Results for proposals that are not outstanding (``ids``), or a reset of a chain
    that has a state. Nothing was changed."""


class Busy(ServiceError):
    """Too much contention on the same chains to finish; nothing was changed, retry."""


class Quota(ServiceError):
    """The caller's sessions already use what one key may have (sessions or memory);
    deleting some makes room. Nothing was changed."""


class SamplerFailed(ServiceError):
    """The sampler raised on a chain (a defect, or arithmetic it does not guard against);
    the session is stopped (``stopped_by: "sampler_error"``) so that no request meets it
    again. ``chain`` names the chain."""


def guarded(chain: int, call: Callable[[], T]) -> T:
    """``call()``, a sampler's ask or tell on ``chain``: whatever it raises becomes
    :class:`SamplerFailed` (never a 500, and the session does not meet it again)."""
    try:
        return call()
    except Exception as exc:
        raise SamplerFailed(
            f"the sampler failed on chain {chain} ({type(exc).__name__}: {exc})", chain=chain
        ) from exc
