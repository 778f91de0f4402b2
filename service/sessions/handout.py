"""What an ask or a step hands out: each proposal as the protocol gives it, and the
evaluations of chains with rounds (:mod:`.rounds`), leased one by one."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kameleon.service.core_api import Proposal
from kameleon.service.ids import format_id
from kameleon.service.sessions.chains import Chains, ChainView, encode_state
from kameleon.service.sessions.decide import ChainPlan
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.rounds import handable, lease_plan, position
from kameleon.service.store.base import Store
from kameleon.service.store.records import ApplyResult, ChainRecord, ChainUpdate

__all__ = ["handed_out", "iso", "rounds_handed_out"]

#: Attempts at a write that another request's may refuse.
ATTEMPTS = 16

#: A leased chain's record decoded, with the session's metadata it was written under.
Decoded = Callable[[SessionMeta, ChainRecord], Awaitable[tuple[SessionMeta, ChainView]]]


@functools.lru_cache(maxsize=64)
def iso(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ISO 8601 in UTC, to the microsecond: what
    ``datetime.fromtimestamp(ts, UTC).isoformat()`` writes, with ``Z`` for ``+00:00``
    (the microseconds rounded half to even from the same product, and left out when
    they are 0). The whole seconds are formatted once each."""
    whole = math.floor(ts)
    micro = round((ts - whole) * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    return f"{_seconds(whole)}.{micro:06d}Z" if micro else f"{_seconds(whole)}Z"


@functools.lru_cache(maxsize=16)
def _seconds(whole: int) -> str:
    return datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def handed_out(ch: ChainView, proposal: Proposal, lease_until: float) -> dict[str, Any]:
    """``proposal`` of ``ch`` as an ask's answer gives it, leased until ``lease_until``."""
    return {
        "id": format_id(ch.chain, proposal.iteration, ch.state.epoch, proposal.step),
        "chain": ch.chain,
        "iteration": proposal.iteration,
        "kind": proposal.kind,
        "step": proposal.step,
        "x": proposal.position,
        "minibatch": None if proposal.minibatch is None else list(proposal.minibatch),
        "block": proposal.block,
        "indices": None if proposal.indices is None else list(proposal.indices),
        "lease_expires_at": iso(lease_until),
    }


async def rounds_handed_out(
    store: Store,
    chains: Chains,
    decoded: Decoded,
    meta: SessionMeta,
    plans: dict[int, ChainPlan],
    result: ApplyResult,
    *,
    want: int,
    lease: float,
    request: str | None,
    touched: Sequence[ChainView],
) -> tuple[SessionMeta, list[dict[str, Any]]]:
    """The evaluations handed out by chains with rounds (:mod:`.rounds`): those the
    told chains' updates leased, then, from each chain leased free, its round's
    evaluations neither held nor leased, up to ``want`` in all, each leased in one
    more write; the chains leased beyond what ``want`` needed are released by that
    write, as they are (one chain is leased per evaluation wanted, as for any
    sampler: a chain's round may be one evaluation).

    A retried request gets back the evaluations still leased to it (its
    ``request_id``): from every chain when the store recognised it (``replayed``,
    with nothing further leased or written), and in any case from the chains it
    told results for, ``touched`` (a step whose answer was lost, retried: its results answer
    ``duplicate``, and what it was handed is still its)."""
    handed: list[dict[str, Any]] = []
    for plan in plans.values():
        if plan.after is not None and plan.handed:
            handed += _round_points(plan.after, plan.handed)
    if request is not None:
        seen = {h["id"] for h in handed}
        mine = await chains.load(meta, range(meta.chains)) if result.replayed else touched
        for ch in mine:
            points = _leased_to(meta, ch, request, result.now)
            handed += [h for h in _round_points(ch, points) if h["id"] not in seen]
    if result.replayed:
        return meta, handed
    left = want - len(handed)
    writes: list[tuple[ChainUpdate, ChainView | None]] = []
    gives: list[tuple[ChainView, list[Proposal]]] = []
    for record in result.leased:
        if record.chain in plans and plans[record.chain].after is not None:
            continue  # leased by its update: handed above
        if left <= 0:  # not needed: released, unread (it was free)
            release = ChainUpdate(
                record.chain, record.version, record.state, True, init_value=record.init_value
            )
            writes.append((release, None))
            continue
        meta, ch = await decoded(meta, record)
        give, leases, seconds = lease_plan(
            meta,
            ch,
            ch.state,
            ch.held,
            ch.leases,
            result.now,
            give=left,
            seconds=lease,
            request=request,
        )
        left -= len(give)
        hot, _ = encode_state(
            ch.state,
            ch.given,
            False,
            meta.revision,
            kept=ch.encoded,
            held=ch.held,
            leases=leases,
        )
        update = ChainUpdate(
            ch.chain, ch.version, hot, True, init_value=ch.init_value, lease_seconds=seconds
        )
        after = dataclasses.replace(ch, version=ch.version + 1, leases=leases)
        writes.append((update, after))
        gives.append((after, give))
    refused = await _write_free(store, chains, meta, writes)
    for ch, give in gives:
        if ch.chain not in refused:
            handed += _round_points(ch, give)
    return meta, handed


def _leased_to(meta: SessionMeta, ch: ChainView, request: str, now: float) -> list[Proposal]:
    """The evaluations of ``ch``'s round leased to ``request`` and running at
    ``now``."""
    places = {(x.iteration, x.step) for x in ch.leases if x.request == request and x.until > now}
    if not places:
        return []
    points = handable(meta, ch, ch.state, ch.held, (), now)
    return [p for p in points if position(p) in places]


def _round_points(ch: ChainView, points: Sequence[Proposal]) -> list[dict[str, Any]]:
    """``points`` of ``ch``'s round as handed out, each with its own lease's end."""
    until = {(x.iteration, x.step): x.until for x in ch.leases}
    return [handed_out(ch, p, until[position(p)]) for p in points]


async def _write_free(
    store: Store,
    chains: Chains,
    meta: SessionMeta,
    writes: list[tuple[ChainUpdate, ChainView | None]],
) -> set[int]:
    """Make ``writes`` (of chains leased free: each with the chain after it, to
    remember, or ``None``); the chains whose write was refused because another
    request moved them on meanwhile, which hand out nothing here (their lease is
    whatever that request left)."""
    refused: set[int] = set()
    for _ in range(ATTEMPTS):
        pending = [(u, ch) for u, ch in writes if u.chain not in refused]
        if not pending:
            return refused
        applied = await store.apply(meta.id, [u for u, _ in pending])
        if not applied.conflicts:
            for _, ch in pending:
                if ch is not None:
                    chains.remember(meta, ch)
            return refused
        refused |= set(applied.conflicts)
    return refused | {u.chain for u, _ in writes}
