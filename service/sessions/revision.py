"""A session revised: ``PATCH /v1/sessions/{id}`` gives it a later ``max_iterations`` or
another stopping rule, and a session that was done goes on.

Three writes, each atomic, in this order:

1. the reservation grows to pay for the draws up to the new ``max_iterations``
   (:meth:`Store.grow`, within the quotas);
2. the metadata is replaced by its next revision and the session's stop is undone
   (:meth:`Store.revise`, a compare-and-set on the revision: of two concurrent updates,
   the second is decided again on the first's result);
3. every chain's record is written back with its state unchanged, marked with the new
   revision, active again where the new ``max_iterations`` lets it go on, its running
   lease kept, unless the session was stopped (:meth:`Store.apply`, all chains or none).

The last write is what keeps other service processes right: each holds the metadata in
a cache, and every chain's version has moved on, so a process that still holds the old
revision fails its next compare-and-set, reads the chain, finds the newer revision on it
(:class:`~.chains.MetaChanged`) and reads the metadata again before it decides anything.
Interrupted between 2 and 3, the session keeps the new metadata and a retry of the same
update finishes step 3 (it is idempotent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kameleon.service.config import Settings
from kameleon.service.core_api import StopRule
from kameleon.service.sessions.budget import iteration_bytes, quota_of
from kameleon.service.sessions.chains import Chains, encode_state
from kameleon.service.sessions.decide import chain_active
from kameleon.service.sessions.errors import Busy, Conflict, Invalid
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainUpdate, Counts

__all__ = ["reserve", "revised", "rewrite_chains"]

ATTEMPTS = 16


def revised(
    meta: SessionMeta,
    changes: Mapping[str, Any],
    top: int,
    stopped_by: str | None,
    settings: Settings,
) -> SessionMeta:
    """``meta``'s next revision with ``changes`` (``max_iterations`` and ``stop``, each
    only if given), checked; ``top`` is the highest iteration of any chain."""
    if stopped_by == "sampler_error":
        raise Conflict(
            "the sampler failed on this session (stopped_by: sampler_error); it cannot go on"
        )
    new = meta
    if "max_iterations" in changes:
        end = changes["max_iterations"]
        if end is not None:
            if end > settings.max_iterations_limit:
                raise Invalid(
                    f"max_iterations is over the limit of {settings.max_iterations_limit}",
                    field="max_iterations",
                )
            floor = max(top, meta.max_iterations or 0)
            if end < floor:
                raise Invalid(
                    f"max_iterations may only grow: at least {floor} (the current "
                    "max_iterations, and the iterations every chain has made)",
                    field="max_iterations",
                )
        new = dataclasses.replace(new, max_iterations=end)
    if "stop" in changes:
        rule = changes["stop"]
        if rule is not None and meta.sampler.weighted:
            raise Invalid(
                f"{meta.algorithm} draws are weighted, not chains: they have no R-hat for a "
                "stopping rule",
                field="stop",
            )
        try:
            stop = None if rule is None else StopRule(rule.rhat, rule.ess, rule.check_every)
        except ValueError as exc:
            raise Invalid(str(exc), field="stop") from None
        new = dataclasses.replace(new, stop=stop)
    if new.estimated_bytes > settings.max_session_bytes:
        raise Invalid(
            f"the session would need about {new.estimated_bytes} bytes of memory with this "
            f"max_iterations; the limit per session is {settings.max_session_bytes}",
            field="max_iterations",
            bytes=new.estimated_bytes,
            limit=settings.max_session_bytes,
        )
    return dataclasses.replace(new, revision=meta.revision + 1)


async def reserve(store: Store, meta: SessionMeta, settings: Settings) -> None:
    """Grow the session's reservation to pay for the draws up to ``meta.max_iterations``
    (an open-ended session grows as it goes: :meth:`Stepper._paid_for`)."""
    if meta.max_iterations is None:
        return
    size = iteration_bytes(meta.dim, meta.chains, len(meta.stats))
    await store.grow(meta.id, meta.max_iterations, size, quota_of(settings))


async def rewrite_chains(store: Store, chains: Chains, new: SessionMeta, keep_leases: bool) -> None:
    """Step 3 of the module docstring: every chain written back under ``new``; running
    leases are kept if ``keep_leases``, else ended (a session that was stopped has
    chains leased by the very call that stopped it, whose proposals nobody holds)."""
    for _ in range(ATTEMPTS):
        records = await store.load_chains(new.id, range(new.chains))
        now = (await store.apply(new.id, [])).now  # the store's clock, for the leases
        views = [await chains.decode(new, r) for r in records]
        updates = []
        for record, ch in zip(records, views, strict=True):
            hot, _ = encode_state(
                ch.state, ch.given, False, new.revision, held=ch.held, leases=ch.leases
            )
            # Counted finished: a chain with a state that has nothing to hand out.
            finished = ch.state.logdensity is not None and not record.active
            updates.append(
                ChainUpdate(
                    ch.chain,
                    ch.version,
                    hot,
                    chain_active(new, ch.state, ch.init_value),
                    init_value=ch.init_value,
                    lease_seconds=max(0.0, record.lease_until - now) if keep_leases else 0.0,
                    counts=Counts(
                        finished=int(ch.state.logdensity is not None and new.is_done(ch.state))
                        - int(finished)
                    ),
                )
            )
        result = await store.apply(new.id, updates)
        if not result.conflicts:
            for ch in views:
                chains.rewritten(new, dataclasses.replace(ch, revision=new.revision))
            return
    raise Busy("too much contention on this session's chains; retry")
