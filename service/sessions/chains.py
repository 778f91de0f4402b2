"""Chains as this process sees them: stored records with their states decoded, cached.

Writes are optimistic. A process keeps the chain states it last read or wrote, keyed by
the chain's version; a tell decides on those and writes with compare-and-set, and reads
the store again only for chains the store says have moved on (see ``stepping``).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kameleon.service.core_api import (
    CodecError,
    Memo,
    Proposal,
    ask_many,
    decode,
    encode,
    slot_init,
)
from kameleon.service.jsonio import dumps, loads
from kameleon.service.sessions.errors import Conflict, guarded
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainRecord

__all__ = ["LRU", "ChainView", "Chains", "Held", "MetaChanged", "PointLease", "encode_state"]

#: Chains whose decoded state (and cold part) a process keeps. These caches only save
#: store reads: a chain that fell out is read again. A kernel sampler's chain holds its
#: subsample (64 KB for n = 1000, d = 8), so the bound is also one on memory.
CACHE_SIZE = 16_384

#: Key of the encoded hot state that marks a chain given an initial point by a reset
#: (absent: it never was). The codec reads only its own keys, so the mark rides along.
_GIVEN = "given"
#: Key of the encoded hot state that holds the revision of the session's metadata the
#: state was written under (absent: 0, the metadata it was created with).
_REVISION = "revision"
#: Keys of the encoded hot state of a chain with rounds (:mod:`kameleon.core.populations.rounds`):
#: the results told ahead of the chain's outstanding evaluation, kept until those before
#: them are told, and the leases of its round's evaluations handed out.
_HELD = "held"
_LEASES = "leases"


class Held(NamedTuple):
    """A result told for an evaluation of a chain's round ahead of its outstanding one,
    kept until those before it are told: its place, its value and, told in parts, the
    log prior and log likelihood."""

    iteration: int
    step: int
    value: float
    log_prior: float | None = None
    log_likelihood: float | None = None

    def encoded(self) -> list[Any]:
        parts = [None if v is None else v.hex() for v in (self.log_prior, self.log_likelihood)]
        return [self.iteration, self.step, self.value.hex(), *parts]

    @classmethod
    def decoded(cls, doc: Any) -> Held:
        iteration, step, value, prior, likelihood = doc
        return cls(
            int(iteration),
            int(step),
            float.fromhex(value),
            None if prior is None else float.fromhex(prior),
            None if likelihood is None else float.fromhex(likelihood),
        )


class MetaChanged(Exception):
    """A chain was written under a newer revision of its session's metadata than the one
    at hand (another process revised the session): read the metadata again.

    Revising a session rewrites every chain (:meth:`Catalog.revise`), so a process that
    still holds the old metadata meets this on the first chain it reads, or on the first
    write it makes (the compare-and-set fails, and the chain is read), before it decides
    anything on the old metadata.
    """


class LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.size:
            self.popitem(last=False)


class PointLease(NamedTuple):
    """The lease of one evaluation of a chain's round: until when (the store's clock)
    no one else is handed it, and the ``request_id`` of the request it was handed to
    (``None``: none given), so that a retry of that request gets it back."""

    iteration: int
    step: int
    until: float
    request: str | None = None

    def encoded(self) -> list[Any]:
        return [self.iteration, self.step, self.until.hex(), self.request]

    @classmethod
    def decoded(cls, doc: Any) -> PointLease:
        iteration, step, until, request = doc
        return cls(int(iteration), int(step), float.fromhex(until), request and str(request))


@slot_init  # made at every write
@dataclass(frozen=True, slots=True)
class ChainView:
    """A chain's record with its state decoded.

    ``given``: the chain was given an initial point by a reset. From then on its initial
    points are used as given, never replaced by a draw; so in a chain that never was, every
    epoch before the current one ended with a drawn point told ``-inf`` and replaced.
    """

    chain: int
    version: int
    state: Any
    cold_version: int
    init_value: float | None
    draws: int
    inits: int
    given: bool = False
    #: The revision of the session's metadata the chain's record was written under.
    revision: int = 0
    #: The objects of ``state`` and their encodings, when this process wrote it: the
    #: next write encodes only what its transition changed
    #: (:func:`kameleon.core.interface.documents.encode`).
    encoded: Memo | None = field(default=None, compare=False, repr=False)
    #: A chain with rounds: results told ahead of its outstanding evaluation, in order,
    #: and the leases of its round's evaluations handed out and not told.
    held: tuple[Held, ...] = ()
    leases: tuple[PointLease, ...] = ()

    @property
    def waiting(self) -> bool:
        """Whether the chain waits for a reset: its initial point was told ``-inf`` and
        it was not replaced."""
        return self.state.logdensity is None and self.init_value is not None

    def status(self, meta: SessionMeta, stopped: bool = False) -> str:
        if self.state.logdensity is None:
            return "needs_initial_point" if self.init_value is not None else "initial"
        if stopped or meta.is_done(self.state):
            return "done"
        return "warmup" if self.state.iteration < meta.warmup else "sampling"

    def same_record(self, record: ChainRecord) -> bool:
        return (
            self.version == record.version
            and self.init_value == record.init_value
            and self.draws == record.draws
            and self.inits == record.inits
        )


def encode_state(
    state: Any,
    given: bool,
    with_cold: bool,
    revision: int = 0,
    *,
    memo: Memo | None = None,
    kept: Memo | None = None,
    held: Sequence[Held] = (),
    leases: Sequence[PointLease] = (),
) -> tuple[bytes, bytes | None]:
    """The stored hot part (with the mark of a chain given a point by a reset, the
    metadata's ``revision`` and a round's ``held`` results and ``leases``) and, when
    ``with_cold``, the cold part. ``memo`` and ``kept``: see
    :func:`kameleon.core.interface.documents.encode`."""
    hot_doc, cold_doc = encode(state, with_cold=with_cold, memo=memo, kept=kept)
    if given:
        hot_doc[_GIVEN] = True
    if revision:
        hot_doc[_REVISION] = revision
    if held:
        hot_doc[_HELD] = [h.encoded() for h in held]
    if leases:
        hot_doc[_LEASES] = [lease.encoded() for lease in leases]
    return dumps(hot_doc), (dumps(cold_doc) if with_cold else None)


class Chains:
    """The chains of one store's sessions as this process last saw them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._chains: LRU = LRU(CACHE_SIZE)
        self._cold: LRU = LRU(CACHE_SIZE)
        self._proposals: LRU = LRU(CACHE_SIZE)

    def forget(self, session_id: str) -> None:
        """Drop what this process keeps of a session's chains (it was deleted or has
        expired), so that its states are not kept until the caches push them out."""
        for cache in (self._chains, self._cold, self._proposals):
            for key in [k for k in cache if k[0] == session_id]:
                del cache[key]

    def remember(self, meta: SessionMeta, chain: ChainView) -> None:
        self._chains.put((meta.id, chain.chain), chain)

    def rewritten(self, meta: SessionMeta, chain: ChainView) -> None:
        """``chain`` was written back unchanged (its lease set): remember it one version
        on, with the proposal it waits for."""
        new = dataclasses.replace(chain, version=chain.version + 1)
        self.remember(meta, new)
        cached = self._proposals.get((meta.id, chain.chain))
        if cached is not None and cached[0] == chain.version:
            self._proposals.put((meta.id, chain.chain), (new.version, cached[1]))

    async def decode(self, meta: SessionMeta, record: ChainRecord) -> ChainView:
        """A record with its state decoded, from the cache when it is the same record."""
        key = (meta.id, record.chain)
        cached: ChainView | None = self._chains.get(key)
        if cached is not None and cached.same_record(record):
            return _checked(meta, cached)
        cold = await self._cold_doc(meta, record.chain, record.cold_version)
        try:
            hot = loads(record.state)
            state = decode(hot, cold)
            held = tuple(Held.decoded(h) for h in hot.get(_HELD, ()))
            leases = tuple(PointLease.decoded(x) for x in hot.get(_LEASES, ()))
        except (CodecError, ValueError, TypeError) as exc:  # a corrupt store entry
            raise Conflict(f"chain {record.chain} cannot be decoded: {exc}") from None
        chain = ChainView(
            record.chain,
            record.version,
            state,
            record.cold_version,
            record.init_value,
            record.draws,
            record.inits,
            hot.get(_GIVEN) is True,
            int(hot.get(_REVISION, 0)),
            held=held,
            leases=leases,
        )
        self._chains.put(key, chain)
        return _checked(meta, chain)

    async def _cold_doc(self, meta: SessionMeta, chain: int, cold_version: int) -> dict[str, Any]:
        key = (meta.id, chain)
        cached = self._cold.get(key)
        if cached is not None and cached[0] == cold_version:
            return cached[1]  # type: ignore[no-any-return]
        version, raw = await self.store.load_cold(meta.id, chain)
        doc = loads(raw)
        self._cold.put(key, (version, doc))
        return doc  # type: ignore[no-any-return]

    async def load(self, meta: SessionMeta, chains: Sequence[int]) -> list[ChainView]:
        """The chains as stored now."""
        records = await self.store.load_chains(meta.id, list(chains))
        return [await self.decode(meta, r) for r in records]

    async def current(
        self, meta: SessionMeta, chains: Sequence[int], reload: set[int], verified: set[int]
    ) -> dict[int, ChainView]:
        """Chains as last seen by this process (optimistic); those it has not seen and
        those in ``reload`` are read from the store and added to ``verified``."""
        out: dict[int, ChainView] = {}
        missing = []
        for c in chains:
            cached = self._chains.get((meta.id, c))
            if cached is None or c in reload:
                missing.append(c)
            else:
                out[c] = _checked(meta, cached)
        if missing:
            for ch in await self.load(meta, missing):
                out[ch.chain] = ch
                verified.add(ch.chain)
        return out

    def outstanding(self, meta: SessionMeta, chain: ChainView) -> Proposal | None:
        """The proposal this process last handed out for ``chain``, if it is still the
        one the chain waits for (asking is pure, so this only saves recomputing it)."""
        cached = self._proposals.get((meta.id, chain.chain))
        if cached is not None and cached[0] == chain.version:
            return cached[1]  # type: ignore[no-any-return]
        return None

    def proposal(self, meta: SessionMeta, chain: ChainView) -> Proposal:
        """The chain's outstanding proposal (computed once per version)."""
        proposal = self.outstanding(meta, chain)
        return proposal if proposal is not None else self._asked(meta, chain)

    def _asked(self, meta: SessionMeta, chain: ChainView) -> Proposal:
        """The chain's outstanding proposal, asked of its sampler and kept."""
        proposal = guarded(chain.chain, lambda: meta.sampler.ask(chain.state, meta.params))
        self._proposals.put((meta.id, chain.chain), (chain.version, proposal))
        return proposal

    def proposals(self, meta: SessionMeta, chains: Sequence[ChainView]) -> list[Proposal]:
        """:meth:`proposal` of each of ``chains``: those not computed yet are asked in
        one batched ask (:func:`core.running.batch.ask_many`, the same proposals); when that
        fails, chain by chain, so that the failure names its chain."""
        out = [self.outstanding(meta, ch) for ch in chains]
        asking = [i for i, p in enumerate(out) if p is None]
        if len(asking) == 1:
            out[asking[0]] = self._asked(meta, chains[asking[0]])
        elif asking:
            try:
                asked = ask_many(meta.sampler, [chains[i].state for i in asking], meta.params)
            except Exception:
                asked = [self._asked(meta, chains[i]) for i in asking]
            for i, p in zip(asking, asked, strict=True):
                ch = chains[i]
                self._proposals.put((meta.id, ch.chain), (ch.version, p))
                out[i] = p
        return out  # type: ignore[return-value]


def _checked(meta: SessionMeta, chain: ChainView) -> ChainView:
    """``chain``, unless it was written under newer metadata than ``meta``."""
    if chain.revision > meta.revision:
        raise MetaChanged(meta.id)
    return chain
