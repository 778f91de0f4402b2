"""What an ask's answer writes of a proposal: its lease's expiry in ISO 8601."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from kameleon.service.sessions.handout import iso


def _reference(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=0.0, max_value=4.1e9, allow_nan=False))
def test_iso_writes_what_datetime_writes(ts: float) -> None:
    # The whole seconds are formatted once each and the microseconds apart: the text
    # must be datetime's to the character, rounding and all.
    assert iso(ts) == _reference(ts)


def test_iso_at_the_edges_of_a_microsecond_and_a_second() -> None:
    second = 1_765_150_000.0
    for ts in (
        second,  # no fraction: datetime writes none
        second + 0.5e-6,  # half a microsecond: rounds to even
        second + 1.5e-6,
        second + 0.9999995,  # rounds up into the next second
        second + 0.9999996,
        second - 1e-7,
        0.0,
        0.25,
    ):
        assert iso(ts) == _reference(ts), ts
    assert iso(second) == "2025-12-07T23:26:40Z"
    assert iso(second + 0.25) == "2025-12-07T23:26:40.250000Z"
