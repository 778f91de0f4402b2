"""A request is applied whole or not at all: two service processes on one store."""

from __future__ import annotations

import pytest

from kameleon.service.config import Settings
from kameleon.service.schemas import SessionCreate, TellResult
from kameleon.service.sessions import SessionService
from kameleon.service.sessions.errors import Conflict
from kameleon.service.store.memory_store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _results(proposals: list[dict[str, object]], value: float) -> list[TellResult]:
    return [TellResult(id=str(p["id"]), log_density=value) for p in proposals]


async def test_a_409_after_another_process_moved_a_chain_applies_nothing() -> None:
    store = MemoryStore()
    one, two = SessionService(store, Settings()), SessionService(store, Settings())
    created = await one.create(SessionCreate(algorithm="rwm", dim=2, chains=2, seed=1), "")
    sid = created["id"]
    first = (await one.ask(sid, "", 2, None))["proposals"]
    proposals = (await one.step(sid, "", _results(first, -1.0), 2, None))["proposals"]
    assert sorted(p["chain"] for p in proposals) == [0, 1]
    late = [p for p in proposals if p["chain"] == 1]
    # The other process answers chain 1's proposal first (its lease ran out here, say).
    await two.tell(sid, "", _results(late, -0.5))
    before = await two.summary(sid, "")
    # This process, on its cached chains, tells both: chain 0's result is good, chain 1's
    # has a different value than the one that stands.
    with pytest.raises(Conflict) as refused:
        await one.tell(sid, "", _results(proposals, -0.9))
    assert refused.value.extra["ids"] == [late[0]["id"]]
    assert await two.summary(sid, "") == before  # chain 0 was not applied either
    assert [r.draws for r in await store.load_chains(sid, [0, 1])] == [0, 1]
    # Without the refused result, the rest is applied.
    good = [p for p in proposals if p["chain"] == 0]
    answer = await one.tell(sid, "", _results(good, -0.9))
    assert answer["results"][0]["outcome"] in ("accepted", "rejected")
    # And the value that stands is a duplicate for either process.
    again = await one.tell(sid, "", _results(late, -0.5))
    assert again["results"][0]["outcome"] == "duplicate"
