"""Use cases of the protocol: load chains from the store, call core, write back.

Routes call :class:`SessionService`; it is the only place that knows both the sampler
interface (:mod:`core.base`) and the store (:mod:`service.store.base`).

Writes are optimistic. A process keeps the chain states it last read or wrote, keyed by
the chain's version; a tell computes the next state from that and writes it with
compare-and-set. When another process moved the chain on meanwhile, the store refuses
the write and returns the current record, and the tell is decided again on that record.
With one process per session (the common case) a tell or a step is one store round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import numpy as np

from core import SAMPLERS
from core.base import OptionError, Proposal, StepInfo, describe_params, reset
from core.diagnostics import summarize
from core.serialization import CodecError, cold_changed, decode, encode
from service import errors
from service.config import Settings
from service.ids import format_id, parse_id
from service.jsonio import dumps, loads
from service.schemas import SessionCreate, TellResult
from service.store.base import ChainRecord, ChainUpdate, SessionNotFound, Store

__all__ = ["ROW_HEADER", "SessionMeta", "SessionService"]

#: Columns before the position in a draw row: told log density, the chain's log density
#: after the transition, and 1.0 if the proposal was accepted.
ROW_HEADER = 3
_MAX_CAS_ATTEMPTS = 16
#: Chains whose decoded state (and cold part) a process keeps. These caches only save
#: store reads: a chain that fell out is read again. A kernel sampler's chain holds its
#: subsample (64 KB for n = 1000, d = 8), so the bound is also one on memory.
_CACHE_SIZE = 16_384


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What a session is; written once at creation."""

    id: str
    owner: str
    algorithm: str
    dim: int
    chains: int
    seed: int
    pseudo_marginal: bool
    warmup: int
    max_iterations: int | None
    param_names: tuple[str, ...]
    options: dict[str, Any]
    created_at: float
    sampler: ModuleType = field(compare=False, repr=False)
    params: Any = field(compare=False, repr=False)

    @staticmethod
    def build(doc: dict[str, Any]) -> SessionMeta:
        sampler = SAMPLERS[doc["algorithm"]]
        params = sampler.make_params(doc["dim"], doc["options"], warmup=doc["warmup"])
        return SessionMeta(
            id=doc["id"],
            owner=doc["owner"],
            algorithm=doc["algorithm"],
            dim=doc["dim"],
            chains=doc["chains"],
            seed=doc["seed"],
            pseudo_marginal=doc["pseudo_marginal"],
            warmup=doc["warmup"],
            max_iterations=doc["max_iterations"],
            param_names=tuple(doc["param_names"]),
            options=doc["options"],
            created_at=doc["created_at"],
            sampler=sampler,
            params=params,
        )

    def to_bytes(self) -> bytes:
        return dumps(
            {
                "id": self.id,
                "owner": self.owner,
                "algorithm": self.algorithm,
                "dim": self.dim,
                "chains": self.chains,
                "seed": self.seed,
                "pseudo_marginal": self.pseudo_marginal,
                "warmup": self.warmup,
                "max_iterations": self.max_iterations,
                "param_names": list(self.param_names),
                "options": self.options,
                "created_at": self.created_at,
            }
        )

    def resolved_options(self) -> dict[str, Any]:
        defaults = describe_params(type(self.params), dim=None, warmup=None)
        return {name: getattr(self.params, name) for name in defaults}

    def is_done(self, state: Any) -> bool:
        return self.max_iterations is not None and state.iteration >= self.max_iterations


@dataclass(frozen=True, slots=True)
class _Chain:
    """A chain's record with its state decoded."""

    chain: int
    version: int
    state: Any
    cold_version: int
    init_value: float | None
    draws: int
    inits: int

    @staticmethod
    def of(record: ChainRecord, state: Any) -> _Chain:
        return _Chain(
            record.chain,
            record.version,
            state,
            record.cold_version,
            record.init_value,
            record.draws,
            record.inits,
        )


class _LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.size:
            self.popitem(last=False)


def _chain_status(meta: SessionMeta, chain: _Chain) -> str:
    state = chain.state
    if state.logdensity is None:
        return "needs_initial_point" if chain.init_value is not None else "initial"
    if meta.is_done(state):
        return "done"
    return "warmup" if state.iteration < meta.warmup else "sampling"


def _active(meta: SessionMeta, state: Any, init_value: float | None) -> bool:
    if state.logdensity is None:
        return init_value is None
    return not meta.is_done(state)


def _row(told: float, state: Any, accepted: bool) -> bytes:
    header = struct.pack("<3d", told, state.logdensity, 1.0 if accepted else 0.0)
    return header + np.ascontiguousarray(state.position, dtype="<f8").tobytes()


@functools.lru_cache(maxsize=64)
def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


class SessionService:
    """The protocol's use cases over one store."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._meta: _LRU = _LRU(10_000)
        self._chains: _LRU = _LRU(_CACHE_SIZE)
        self._cold: _LRU = _LRU(_CACHE_SIZE)
        self._proposals: _LRU = _LRU(_CACHE_SIZE)
        self._touched: dict[str, float] = {}

    async def store_ready(self) -> bool:
        try:
            return await asyncio.wait_for(self.store.ping(), timeout=2.0)
        except Exception:
            return False

    # ------------------------------------------------------------------ sessions

    async def create(self, body: SessionCreate, owner: str) -> dict[str, Any]:
        s = self.settings
        if body.dim > s.max_dim:
            raise errors.Unprocessable(f"dim is over the limit of {s.max_dim}", field="dim")
        if body.chains > s.max_chains:
            raise errors.Unprocessable(
                f"chains is over the limit of {s.max_chains}", field="chains"
            )
        for name in ("warmup", "max_iterations"):
            value = getattr(body, name)
            if value is not None and value > s.max_iterations_limit:
                raise errors.Unprocessable(
                    f"{name} is over the limit of {s.max_iterations_limit}", field=name
                )
        sampler = SAMPLERS[body.algorithm]
        try:
            params = sampler.make_params(body.dim, body.options, warmup=body.warmup)
        except OptionError as exc:
            raise errors.Unprocessable(str(exc), field=f"options.{exc.option}") from None
        initial = self._initial_rows(body)
        names = body.param_names or [f"x{i}" for i in range(body.dim)]
        if len(names) != body.dim or len(set(names)) != body.dim:
            raise errors.Unprocessable(
                "param_names must be dim distinct names", field="param_names"
            )
        seed = body.seed if body.seed is not None else secrets.randbits(63)
        meta = SessionMeta(
            id=secrets.token_hex(12),
            owner=owner,
            algorithm=body.algorithm,
            dim=body.dim,
            chains=body.chains,
            seed=seed,
            pseudo_marginal=body.pseudo_marginal,
            warmup=body.warmup,
            max_iterations=body.max_iterations,
            param_names=tuple(names),
            options=dict(body.options),
            created_at=time.time(),
            sampler=sampler,
            params=params,
        )
        records, colds = [], []
        for c in range(body.chains):
            state = sampler.init(initial[c], params, seed=seed, chain=c)
            hot, cold = encode(state)
            records.append(ChainRecord(c, 0, dumps(hot), 0, 0.0, True, None, 0, 0))
            colds.append(dumps(cold))
        warming = body.chains if body.warmup > 0 else 0
        await self.store.create_session(meta.id, owner, meta.to_bytes(), records, colds, warming)
        self._meta.put(meta.id, meta)
        return await self.summary(meta.id, owner)

    @staticmethod
    def _initial_rows(body: SessionCreate) -> list[list[float]]:
        if body.initial is None:
            return [[0.0] * body.dim] * body.chains
        rows = body.initial
        if len(rows) not in (1, body.chains):
            raise errors.Unprocessable(
                f"initial must have 1 or {body.chains} rows, not {len(rows)}", field="initial"
            )
        for row in rows:
            if len(row) != body.dim:
                raise errors.Unprocessable(
                    f"each initial row must have {body.dim} values", field="initial"
                )
        return rows * body.chains if len(rows) == 1 else rows

    async def meta(self, session_id: str, owner: str) -> SessionMeta:
        meta: SessionMeta | None = self._meta.get(session_id)
        if meta is None:
            try:
                doc = loads(await self.store.get_meta(session_id))
            except SessionNotFound:
                raise errors.NotFound("no such session") from None
            meta = SessionMeta.build(doc)
            self._meta.put(session_id, meta)
        if meta.owner != owner:
            raise errors.NotFound("no such session")
        await self._touch(session_id)
        return meta

    async def _touch(self, session_id: str) -> None:
        """Refresh the session's expiry, at most every tenth of its time to live."""
        now = time.monotonic()
        if now - self._touched.get(session_id, -math.inf) > self.settings.session_ttl_seconds / 10:
            self._touched[session_id] = now
            await self.store.touch(session_id)

    def _forget(self, session_id: str) -> None:
        self._meta.pop(session_id, None)
        self._touched.pop(session_id, None)

    async def summary(self, session_id: str, owner: str) -> dict[str, Any]:
        meta = await self.meta(session_id, owner)
        chains = await self._load(meta, range(meta.chains))
        return self._summary(meta, chains)

    def _summary(self, meta: SessionMeta, chains: Sequence[_Chain]) -> dict[str, Any]:
        per_chain = []
        for ch in chains:
            st = ch.state
            evaluations = st.iteration + ch.inits
            per_chain.append(
                {
                    "chain": ch.chain,
                    "status": _chain_status(meta, ch),
                    "iterations": st.iteration,
                    "evaluations": int(evaluations),
                    "acceptance_rate": st.accepted / st.iteration if st.iteration else None,
                    "resets": st.epoch,
                }
            )
        iterations = sum(c["iterations"] for c in per_chain)
        accepted = sum(ch.state.accepted for ch in chains)
        return {
            "id": meta.id,
            "algorithm": meta.algorithm,
            "dim": meta.dim,
            "chains": meta.chains,
            "seed": meta.seed,
            "pseudo_marginal": meta.pseudo_marginal,
            "warmup": meta.warmup,
            "max_iterations": meta.max_iterations,
            "param_names": list(meta.param_names),
            "options": meta.resolved_options(),
            "created_at": _iso(meta.created_at),
            "status": self._session_status(meta, chains),
            "iterations": iterations,
            "evaluations": sum(c["evaluations"] for c in per_chain),
            "acceptance_rate": accepted / iterations if iterations else None,
            "chain_summaries": per_chain,
        }

    @staticmethod
    def _session_status(meta: SessionMeta, chains: Sequence[_Chain]) -> str:
        if chains and all(meta.is_done(ch.state) for ch in chains):
            return "done"
        if any(ch.state.iteration < meta.warmup for ch in chains):
            return "warmup"
        return "sampling"

    async def list_sessions(self, owner: str, cursor: str | None, limit: int) -> dict[str, Any]:
        try:
            page = await self.store.list_sessions(owner, cursor, limit)
        except ValueError:
            raise errors.Unprocessable(
                "cursor is not one this service gave out", field="cursor"
            ) from None
        out = []
        for raw in page.sessions:
            doc = loads(raw)
            try:
                out.append(await self.summary(doc["id"], owner))
            except errors.NotFound:
                continue  # deleted meanwhile
        return {"sessions": out, "next": page.next_cursor}

    async def delete(self, session_id: str, owner: str) -> None:
        await self.meta(session_id, owner)
        with contextlib.suppress(SessionNotFound):
            await self.store.delete_session(session_id)
        self._forget(session_id)

    # -------------------------------------------------------------------- chains

    async def _decode(self, meta: SessionMeta, record: ChainRecord) -> _Chain:
        """A record with its state decoded, from the cache when the version matches."""
        key = (meta.id, record.chain)
        cached: _Chain | None = self._chains.get(key)
        if (
            cached is not None
            and cached.version == record.version
            and cached.init_value == record.init_value
            and cached.draws == record.draws
            and cached.inits == record.inits
        ):
            return cached
        cold = await self._cold_doc(meta, record.chain, record.cold_version)
        try:
            state = decode(loads(record.state), cold)
        except (CodecError, ValueError, TypeError) as exc:  # a corrupt store entry
            raise errors.Conflict(f"chain {record.chain} cannot be decoded: {exc}") from None
        chain = _Chain.of(record, state)
        self._chains.put(key, chain)
        return chain

    async def _cold_doc(self, meta: SessionMeta, chain: int, cold_version: int) -> dict[str, Any]:
        key = (meta.id, chain)
        cached = self._cold.get(key)
        if cached is not None and cached[0] == cold_version:
            return cached[1]  # type: ignore[no-any-return]
        version, raw = await self.store.load_cold(meta.id, chain)
        doc = loads(raw)
        self._cold.put(key, (version, doc))
        return doc  # type: ignore[no-any-return]

    async def _load(self, meta: SessionMeta, chains: Sequence[int]) -> list[_Chain]:
        try:
            records = await self.store.load_chains(meta.id, list(chains))
        except SessionNotFound:
            self._forget(meta.id)
            raise errors.NotFound("no such session") from None
        return [await self._decode(meta, r) for r in records]

    async def _current(
        self, meta: SessionMeta, chains: Sequence[int], reload: set[int], verified: set[int]
    ) -> dict[int, _Chain]:
        """Chains as last seen by this process (optimistic); those it has not seen and
        those in ``reload`` are read from the store and added to ``verified``."""
        out: dict[int, _Chain] = {}
        missing = []
        for c in chains:
            cached = self._chains.get((meta.id, c))
            if cached is None or c in reload:
                missing.append(c)
            else:
                out[c] = cached
        if missing:
            for ch in await self._load(meta, missing):
                out[ch.chain] = ch
                verified.add(ch.chain)
        return out

    # ------------------------------------------------------------- ask/tell/step

    def _lease(self, lease_seconds: float | None) -> float:
        lease = lease_seconds if lease_seconds is not None else self.settings.default_lease_seconds
        if lease > self.settings.max_lease_seconds:
            raise errors.Unprocessable(
                f"lease_seconds is over the limit of {self.settings.max_lease_seconds}",
                field="lease_seconds",
            )
        return lease

    def _check_max(self, value: int) -> None:
        if value > self.settings.max_ask:
            raise errors.Unprocessable(
                f"max is over the limit of {self.settings.max_ask}", field="max"
            )

    async def ask(
        self, session_id: str, owner: str, max_: int, lease_seconds: float | None
    ) -> dict[str, Any]:
        self._check_max(max_)
        lease = self._lease(lease_seconds)
        meta = await self.meta(session_id, owner)
        _, proposals, status = await self._step(meta, [], max_, lease)
        return {"proposals": proposals, **status}

    async def tell(
        self, session_id: str, owner: str, results: Sequence[TellResult]
    ) -> dict[str, Any]:
        meta = await self.meta(session_id, owner)
        outcomes, _, _ = await self._step(meta, results, 0, 0.0)
        return {"results": outcomes}

    async def step(
        self,
        session_id: str,
        owner: str,
        results: Sequence[TellResult],
        max_: int | None,
        lease_seconds: float | None,
    ) -> dict[str, Any]:
        want = max_ if max_ is not None else max(1, len(results))
        self._check_max(want)
        lease = self._lease(lease_seconds)
        meta = await self.meta(session_id, owner)
        outcomes, proposals, status = await self._step(meta, results, want, lease)
        return {"results": outcomes, "proposals": proposals, **status}

    @staticmethod
    def _status(meta: SessionMeta, warming: int, finished: int) -> dict[str, Any]:
        status = "done" if finished >= meta.chains else "warmup" if warming > 0 else "sampling"
        return {"status": status, "done": status == "done"}

    def _validate(self, meta: SessionMeta, results: Sequence[TellResult]) -> list[tuple[int, Any]]:
        """Parse every result before anything is applied (422 on the first bad one)."""
        parsed = []
        for i, result in enumerate(results):
            pid = parse_id(result.id)
            if pid is None:
                raise errors.Unprocessable(
                    f"results[{i}].id: {result.id!r} is not a proposal id", field=f"results.{i}.id"
                )
            if result.gradient is not None and len(result.gradient) != meta.dim:
                raise errors.Unprocessable(
                    f"results[{i}].gradient must have {meta.dim} values",
                    field=f"results.{i}.gradient",
                )
            parsed.append((pid.chain, pid))
        return parsed

    async def _told_value(self, meta: SessionMeta, chain: int, iteration: int) -> float:
        """The log density told for an applied iteration of ``chain``."""
        raw = await self.store.read_draws(
            meta.id, chain, iteration - 1, iteration, 8 * (ROW_HEADER + meta.dim)
        )
        if len(raw) < 8:  # the chain was rewritten under us: the session is gone
            self._forget(meta.id)
            raise errors.NotFound("no such session")
        return float(struct.unpack_from("<d", raw, 0)[0])

    async def _step(
        self, meta: SessionMeta, results: Sequence[TellResult], want: int, lease: float
    ) -> tuple[list[dict[str, str]], list[dict[str, Any]], dict[str, Any]]:
        """Tell ``results``, then lease up to ``want`` proposals: the told chains' next
        ones first, then free chains. Returns the outcomes, the proposals and the
        session's status."""
        parsed = self._validate(meta, results)
        outcomes: list[str] = [""] * len(results)
        by_chain: dict[int, list[int]] = {}
        for i, (chain, _) in enumerate(parsed):
            by_chain.setdefault(chain, []).append(i)
        unknown = [results[i].id for c, idx in by_chain.items() if c >= meta.chains for i in idx]
        if unknown:
            raise errors.Conflict(f"proposal {unknown[0]} was never issued", ids=unknown)

        sampler, params = meta.sampler, meta.params
        pending = dict(by_chain)
        proposals: list[dict[str, Any]] = []
        applied_states: dict[int, _Chain] = {}
        verified: set[int] = set()  # chains whose state was read from the store in this call
        reload: set[int] = set()
        applied_any = False
        for _ in range(_MAX_CAS_ATTEMPTS):
            current = await self._current(meta, list(pending), reload, verified)
            reload = set()
            updates: list[ChainUpdate] = []
            planned: dict[int, _Chain] = {}
            conflicts: list[str] = []
            budget = want - len(proposals)
            for chain, indices in pending.items():
                told = [(parsed[i][1], results[i].log_density) for i in indices]
                update, new, chain_conflicts = await self._plan(
                    meta, current[chain], told, outcomes, indices, lease if budget > 0 else 0.0
                )
                if update is not None and update.lease_seconds > 0:
                    budget -= 1
                conflicts += [results[i].id for i in chain_conflicts]
                if update is not None and new is not None:
                    updates.append(update)
                    planned[chain] = new
            unverified = {parse_id(i).chain for i in conflicts} - verified  # type: ignore[union-attr]
            if unverified:
                # Decided on a cached state: the chain may have moved on elsewhere.
                reload |= unverified
                continue
            if conflicts:
                detail = f"proposal {conflicts[0]} is not outstanding"
                if not applied_any:
                    raise errors.Conflict(detail, ids=conflicts)
                done = [
                    {"id": r.id, "outcome": o} for r, o in zip(results, outcomes, strict=True) if o
                ]
                raise errors.Conflict(
                    detail + "; the other results were applied", ids=conflicts, results=done
                )
            extra = max(0, budget)
            try:
                result = await self.store.apply(
                    meta.id, updates, lease=extra, lease_seconds=lease, exclude=list(by_chain)
                )
            except SessionNotFound:
                self._forget(meta.id)
                raise errors.NotFound("no such session") from None
            applied_any = applied_any or bool(result.applied)
            for chain in result.applied:
                self._chains.put((meta.id, chain), planned[chain])
                applied_states[chain] = planned[chain]
            for record in result.leased:
                ch = applied_states.get(record.chain) or await self._decode(meta, record)
                proposals.append(self._proposal(meta, sampler, params, ch, record.lease_until))
            pending = {}
            for chain, record in result.conflicts.items():
                await self._decode(meta, record)  # refresh the cache, then decide again
                verified.add(chain)
                pending[chain] = by_chain[chain]
                for i in by_chain[chain]:
                    outcomes[i] = ""
            if not pending:
                break
        else:
            raise errors.ServiceUnavailable("too much contention on these chains; retry")
        answered = [{"id": r.id, "outcome": o} for r, o in zip(results, outcomes, strict=True)]
        return answered, proposals, self._status(meta, result.warming, result.finished)

    async def _plan(
        self,
        meta: SessionMeta,
        ch: _Chain,
        told: list[tuple[Any, float]],
        outcomes: list[str],
        indices: list[int],
        lease: float,
    ) -> tuple[ChainUpdate | None, _Chain | None, list[int]]:
        """Decide a chain's results; the update to write (if any) and the conflicts.

        ``lease`` > 0: lease the chain's next proposal to this caller if it has one."""
        state, init_value = ch.state, ch.init_value
        told_here: dict[tuple[int, int], float] = {}
        draw: bytes | None = None
        init_told = False
        conflicts: list[int] = []
        for i, (pid, value) in zip(indices, told, strict=True):
            outcome, new = await self._decide(meta, ch, state, init_value, pid, value, told_here)
            if outcome == "conflict":
                conflicts.append(i)
                continue
            outcomes[i] = outcome
            if new is None:
                continue
            told_here[(pid.epoch, pid.iteration)] = value
            state, info, accepted = new
            if info.outcome in ("initialized", "outside_support"):
                init_value = value
                init_told = True
            else:
                draw = _row(value, state, accepted)
        if state is ch.state and init_value == ch.init_value:
            return None, None, conflicts
        changed = cold_changed(ch.state, state)
        hot_doc, cold_doc = encode(state, with_cold=changed)
        hot, cold = dumps(hot_doc), (dumps(cold_doc) if changed else None)
        active = _active(meta, state, init_value)
        update = ChainUpdate(
            ch.chain,
            ch.version,
            hot,
            active,
            cold,
            draw,
            init_value,
            lease if active else 0.0,
            left_warmup=ch.state.iteration < meta.warmup <= state.iteration,
            finished=not meta.is_done(ch.state) and meta.is_done(state),
            init_told=init_told,
        )
        new_chain = _Chain(
            ch.chain,
            ch.version + 1,
            state,
            ch.cold_version + (cold is not None),
            init_value,
            ch.draws + (draw is not None),
            ch.inits + init_told,
        )
        return update, new_chain, conflicts

    async def _decide(
        self,
        meta: SessionMeta,
        ch: _Chain,
        state: Any,
        init_value: float | None,
        pid: Any,
        value: float,
        told_here: dict[tuple[int, int], float],
    ) -> tuple[str, tuple[Any, StepInfo, bool] | None]:
        """Classify one result against the chain: apply it, call it a duplicate, or a
        conflict. Returns the outcome and, when applied, (new state, info, accepted)."""
        sampler, params = meta.sampler, meta.params
        key = (pid.epoch, pid.iteration)
        if key in told_here:
            return ("duplicate" if _same(told_here[key], value) else "conflict"), None
        if pid.iteration == 0:
            if pid.epoch != state.epoch:
                return "conflict", None
            if state.logdensity is None and init_value is None:
                proposal = sampler.ask(state, params)
                new, info = sampler.tell(state, params, proposal, value)
                return info.outcome, (new, info, False)
            if init_value is not None and _same(init_value, value):
                return "duplicate", None
            return "conflict", None
        if state.logdensity is None:
            return "conflict", None
        if pid.iteration == state.iteration + 1 and not meta.is_done(state):
            step_proposal = self._outstanding(meta, ch) if state is ch.state else None
            if step_proposal is None:
                step_proposal = sampler.ask(state, params)
            new, info = sampler.tell(state, params, step_proposal, value)
            return info.outcome, (new, info, info.outcome == "accepted")
        if pid.iteration <= state.iteration:
            told = await self._told_value(meta, ch.chain, pid.iteration)
            return ("duplicate" if _same(told, value) else "conflict"), None
        return "conflict", None

    def _outstanding(self, meta: SessionMeta, ch: _Chain) -> Proposal | None:
        """The proposal this process last handed out for ``ch``, if it is still the one
        the chain waits for (asking is pure, so this only saves recomputing it)."""
        cached = self._proposals.get((meta.id, ch.chain))
        if cached is not None and cached[0] == ch.version:
            return cached[1]  # type: ignore[no-any-return]
        return None

    def _proposal(
        self, meta: SessionMeta, sampler: ModuleType, params: Any, ch: _Chain, lease_until: float
    ) -> dict[str, Any]:
        proposal = self._outstanding(meta, ch)
        if proposal is None:
            proposal = sampler.ask(ch.state, params)
            self._proposals.put((meta.id, ch.chain), (ch.version, proposal))
        return {
            "id": format_id(ch.chain, proposal.iteration, ch.state.epoch),
            "chain": ch.chain,
            "iteration": proposal.iteration,
            "kind": proposal.kind,
            "x": proposal.position,
            "lease_expires_at": _iso(lease_until),
        }

    async def reset_chain(
        self, session_id: str, owner: str, chain: int, initial: Sequence[float]
    ) -> dict[str, Any]:
        meta = await self.meta(session_id, owner)
        if not 0 <= chain < meta.chains:
            raise errors.NotFound(f"no chain {chain} in this session")
        if len(initial) != meta.dim:
            raise errors.Unprocessable(f"initial must have {meta.dim} values", field="initial")
        for _ in range(_MAX_CAS_ATTEMPTS):
            (ch,) = await self._load(meta, [chain])
            if ch.state.logdensity is not None:
                raise errors.Conflict(
                    f"chain {chain} has a current state; only a chain waiting for its "
                    "initial point can be given a new one"
                )
            state = reset(ch.state, initial)
            hot = dumps(encode(state, with_cold=False)[0])
            update = ChainUpdate(chain, ch.version, hot, True, None, None, None, 0.0)
            result = await self.store.apply(meta.id, [update])
            if chain in result.applied:
                new = _Chain(
                    chain, ch.version + 1, state, ch.cold_version, None, ch.draws, ch.inits
                )
                self._chains.put((meta.id, chain), new)
                return self._summary(meta, [new])["chain_summaries"][0]  # type: ignore[no-any-return]
        raise errors.ServiceUnavailable("too much contention on this chain; retry")

    # ------------------------------------------------------------ draws, diagnostics

    async def diagnostics(self, session_id: str, owner: str) -> dict[str, Any]:
        """Convergence diagnostics of the post-warm-up draws (chains cut to a common
        length) and each chain's post-warm-up acceptance rate; computed off the event
        loop."""
        meta = await self.meta(session_id, owner)
        chains: list[dict[str, Any]] = []
        arrays = []
        for ch in await self.store.load_chains(meta.id, range(meta.chains)):
            rows = await self.read_rows(meta, ch.chain, meta.warmup, ch.draws)
            arrays.append(rows)
            chains.append(
                {
                    "chain": ch.chain,
                    "iterations": ch.draws,
                    "draws": len(rows),
                    "acceptance_rate": float(rows[:, 2].mean()) if len(rows) else None,
                }
            )
        common = min(len(a) for a in arrays)
        draws = np.stack([a[:common, ROW_HEADER:] for a in arrays])
        stats = await asyncio.to_thread(summarize, draws, list(meta.param_names))
        parameters = [{k: _none_if_not_finite(v) for k, v in p.items()} for p in stats]
        return {"parameters": parameters, "chains": chains}

    async def read_rows(
        self, meta: SessionMeta, chain: int, start: int, stop: int
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Draw rows ``[start, stop)`` of one chain, shape ``(rows, ROW_HEADER + dim)``."""
        raw = await self.store.read_draws(meta.id, chain, start, stop, 8 * (ROW_HEADER + meta.dim))
        return np.frombuffer(raw, dtype="<f8").reshape(-1, ROW_HEADER + meta.dim)


def _none_if_not_finite(value: Any) -> Any:
    """Statistics that are undefined (NaN) or unbounded (R-hat of stuck chains) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclass(frozen=True, slots=True)
class DrawsQuery:
    """A slice of the draws: chains, ``[start, stop)`` within the selection, thinning."""

    chain: int | None
    start: int
    stop: int | None
    thin: int
    include_warmup: bool


@dataclass(frozen=True, slots=True)
class ChainSlice:
    chain: int
    start: int  # index of the first row within the selection
    first_iteration: int
    rows: np.ndarray[Any, np.dtype[np.float64]]  # (n, ROW_HEADER + dim), thinned


async def read_slices(
    service: SessionService, meta: SessionMeta, query: DrawsQuery, page_rows: int
) -> tuple[list[ChainSlice], int | None]:
    """One page of draws and the selection index where the next page starts (or None).

    A page holds at most ``page_rows`` rows per chain after thinning; chains are read
    slice by slice, never whole.
    """
    chains = [query.chain] if query.chain is not None else list(range(meta.chains))
    records = await service.store.load_chains(meta.id, chains)
    offset = 0 if query.include_warmup else meta.warmup
    span = page_rows * query.thin
    slices, more = [], False
    for record in records:
        length = max(0, record.draws - offset)
        stop = length if query.stop is None else min(query.stop, length)
        end = min(stop, query.start + span)
        if end > query.start:
            rows = await service.read_rows(meta, record.chain, offset + query.start, offset + end)
            rows = rows[:: query.thin]
        else:
            rows = np.empty((0, ROW_HEADER + meta.dim))
        more = more or stop > query.start + span
        slices.append(ChainSlice(record.chain, query.start, offset + query.start + 1, rows))
    return slices, (query.start + span if more else None)
