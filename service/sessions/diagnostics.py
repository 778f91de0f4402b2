"""Convergence diagnostics and warnings of the draws, and the stopping rule.

Draws are never rewritten, so diagnostics are a function of each chain's number of
draws: the store keeps the latest ones, and they are computed (off the event loop) only
when the draws have changed since.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kameleon.service.core_api import assess
from kameleon.service.jsonio import dumps, loads
from kameleon.service.sessions.chains import LRU, Chains
from kameleon.service.sessions.draws import RowLayout, read_rows
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.store.base import Store
from kameleon.service.store.records import ChainRecord, SessionNotFound, StoreUnavailable

__all__ = ["Diagnostics"]


class Diagnostics:
    """Diagnostics of one store's sessions, and the stopping rule's checks."""

    def __init__(self, store: Store, chains: Chains) -> None:
        self.store = store
        #: Decodes the chains' states: importance sampling's diagnostics weigh the draws
        #: against the chains' proposals, tempering's evidence is in its chains' states.
        self.chains = chains
        #: Per session, the largest multiple of ``check_every`` its stopping rule was
        #: checked at by this process.
        self._checked: LRU = LRU(10_000)

    async def of(self, meta: SessionMeta) -> dict[str, Any]:
        """Diagnostics and warnings of the post-warm-up draws (chains cut to a common
        length) and each chain's post-warm-up acceptance rate."""
        records = await self.store.load_chains(meta.id, range(meta.chains))
        return await self._diagnose(meta, records)

    async def _diagnose(self, meta: SessionMeta, records: Sequence[ChainRecord]) -> dict[str, Any]:
        key = [r.draws for r in records]
        notes = await self.store.notes(meta.id, diagnostics=True)
        if notes.diagnostics is not None:
            kept = loads(notes.diagnostics)
            if kept["key"] == key:
                return kept["diagnostics"]  # type: ignore[no-any-return]
        chains: list[dict[str, Any]] = []
        arrays = []
        for record in records:
            rows = await read_rows(self.store, meta, record.chain, meta.warmup, record.draws)
            arrays.append(rows)
            accepted = rows[:, RowLayout.ACCEPTED]
            chains.append(
                {
                    "chain": record.chain,
                    "iterations": record.draws,
                    "draws": len(rows),
                    "acceptance_rate": float(accepted.mean()) if len(rows) else None,
                }
            )
        common = min(len(a) for a in arrays)
        draws = np.stack([RowLayout.positions(a[:common], meta.dim) for a in arrays])
        log_density = np.stack([a[:common, RowLayout.LOG_DENSITY] for a in arrays])
        acceptance = [c["acceptance_rate"] for c in chains]
        recorded = {
            name: np.stack([RowLayout.stats(a[:common], meta.dim)[:, k] for a in arrays])
            for k, name in enumerate(meta.stats)
        }
        states = None
        if meta.sampler.weighted or meta.sampler.chain_evidence is not None:
            states = [(await self.chains.decode(meta, r)).state for r in records]
        assessment = await asyncio.to_thread(
            assess,
            meta.sampler,
            meta.params,
            draws,
            meta.param_names,
            acceptance=acceptance,
            log_density=log_density,
            stats=recorded,
            states=states,
        )
        stats, found = assessment.summaries, assessment.findings
        warnings = [{k: _none_if_not_finite(v) for k, v in f.as_dict().items()} for f in found]
        times: list[float | None] = [None] * len(stats)
        if assessment.autocorrelation_time is not None:
            times = list(assessment.autocorrelation_time)
        doc = {
            "draws": common,
            "parameters": [
                {k: _none_if_not_finite(v) for k, v in {**p, "autocorrelation_time": t}.items()}
                for p, t in zip(stats, times, strict=True)
            ],
            "chains": chains,
            "warnings": warnings,
            "evidence": (
                None
                if assessment.evidence is None
                else {k: _none_if_not_finite(v) for k, v in assessment.evidence.as_dict().items()}
            ),
        }
        await self.store.save_diagnostics(
            meta.id,
            sum(key),
            dumps({"key": key, "diagnostics": doc}),
            dumps({"draws": common, "warnings": warnings}),
        )
        return doc

    async def weights(self, meta: SessionMeta) -> dict[str, Any]:
        """The log weight of each post-warm-up draw, the chains cut to a common length
        (the draws the diagnostics judge): for weighted draws (``importance``) against
        the mixture of every chain's proposal, as the evidence weighs them; for a Markov
        chain's draws 0, each weighing the same."""
        records = await self.store.load_chains(meta.id, range(meta.chains))
        arrays = [await read_rows(self.store, meta, r.chain, meta.warmup, r.draws) for r in records]
        common = min(len(a) for a in arrays)
        log_w = np.zeros((len(arrays), common))
        if meta.sampler.weighted and common:
            assert meta.sampler.mixture_log_weights is not None
            states = [(await self.chains.decode(meta, r)).state for r in records]
            draws = np.concatenate([RowLayout.positions(a[:common], meta.dim) for a in arrays])
            log_density = np.concatenate([a[:common, RowLayout.LOG_DENSITY] for a in arrays])
            flat = await asyncio.to_thread(
                meta.sampler.mixture_log_weights, states, meta.params, draws, log_density
            )
            log_w = np.asarray(flat, dtype=np.float64).reshape(len(arrays), common)
        return {
            "draws": common,
            "weighted": meta.sampler.weighted,
            "chains": [
                {"chain": r.chain, "log_weights": [_none_if_not_finite(float(v)) for v in row]}
                for r, row in zip(records, log_w, strict=True)
            ],
        }

    async def check_rule(self, meta: SessionMeta, multiple: int) -> bool:
        """Check the stopping rule if every chain has ``multiple`` post-warm-up draws;
        stop the session if it is met. Whether the session is now stopped by the rule.

        Each transition adds one draw, so every chain passes through every multiple; the
        last chain to reach one sees all the others there (the store read follows its
        own write), and checks. A check that fails on the store is made again at the
        next multiple.
        """
        assert meta.stop is not None
        if self._checked.get(meta.id, 0) >= multiple:
            return False
        try:
            records = await self.store.load_chains(meta.id, range(meta.chains))
            if min(r.draws for r in records) - meta.warmup < multiple:
                return False
            self._checked.put(meta.id, multiple)
            doc = await self._diagnose(meta, records)
            if not meta.stop.met([_statistics(p) for p in doc["parameters"]]):
                return False
            return await self.store.stop(meta.id, "rule") == "rule"
        except (SessionNotFound, StoreUnavailable):
            return False


def crossed(meta: SessionMeta, iteration: int) -> int:
    """The post-warm-up draws of a chain at ``iteration`` if they are a multiple of the
    stopping rule's ``check_every`` (a transition just made it so), else 0."""
    if meta.stop is None:
        return 0
    post = iteration - meta.warmup
    return post if post > 0 and post % meta.stop.check_every == 0 else 0


def _statistics(parameter: dict[str, Any]) -> Any:
    """A parameter's diagnostics as :func:`core.diagnostics.summary.summarize` gives them: NaN
    for null (undefined, or an unbounded R-hat, which fails a rule all the same)."""
    return {k: math.nan if v is None else v for k, v in parameter.items()}


def _none_if_not_finite(value: Any) -> Any:
    """Statistics that are undefined (NaN) or unbounded (R-hat of stuck chains) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
