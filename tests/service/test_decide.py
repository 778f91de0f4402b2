"""The exactly-once decision per chain (``sessions.decide.plan_chain``): pure, no store."""

from __future__ import annotations

import math
from typing import Any

from kameleon.service.ids import parse_id
from kameleon.service.sessions.chains import ChainView
from kameleon.service.sessions.decide import ChainPlan, plan_chain
from kameleon.service.sessions.draws import RowLayout
from kameleon.service.sessions.meta import SessionMeta
from kameleon.service.sessions.verdicts import Told


def _meta(**extra: Any) -> SessionMeta:
    doc = {
        "id": "s",
        "owner": "",
        "algorithm": "rwm",
        "dim": 2,
        "chains": 1,
        "seed": 3,
        "pseudo_marginal": False,
        "warmup": 0,
        "max_iterations": None,
        "param_names": ["a", "b"],
        "options": {},
        "created_at": 0.0,
        "initial_radius": 2.0,
        "max_initial_attempts": 10,
    }
    return SessionMeta.build({**doc, **extra})


def _start(meta: SessionMeta, chain: int = 0) -> ChainView:
    state = meta.sampler.init(meta.first_point(chain), meta.params, seed=meta.seed, chain=chain)
    return ChainView(chain, 0, state, 0, None, 0, 0)


def _told(*results: tuple[str, float]) -> list[Told]:
    out = []
    for i, (text, value) in enumerate(results):
        pid = parse_id(text)
        assert pid is not None
        out.append(Told(i, pid, value))
    return out


def _applied(plan: ChainPlan) -> ChainView:
    assert plan.update is not None and plan.after is not None
    assert not plan.conflicts and not plan.missing
    return plan.after


def _initialized(meta: SessionMeta) -> ChainView:
    plan = plan_chain(meta, _start(meta), _told(("c0.i0", -1.0)))
    assert plan.outcomes == {0: "initialized"}
    return _applied(plan)


def test_an_initial_point_is_applied_without_a_draw() -> None:
    meta = _meta()
    plan = plan_chain(meta, _start(meta), _told(("c0.i0", -1.0)), lease=30.0)
    after = _applied(plan)
    assert plan.update is not None
    assert plan.update.expected_version == 0 and plan.update.draw is None
    assert plan.update.lease_seconds == 30.0 and plan.update.init_told
    assert (after.version, after.draws, after.inits, after.state.logdensity) == (1, 0, 1, -1.0)


def test_a_transition_writes_one_row_in_the_layout() -> None:
    meta = _meta()
    chain = _initialized(meta)
    plan = plan_chain(meta, chain, _told(("c0.i1", -0.5)))
    after = _applied(plan)
    assert plan.outcomes[0] in ("accepted", "rejected")
    assert plan.update is not None and plan.update.draw is not None
    (row,) = RowLayout.parse(plan.update.draw, meta.dim)
    assert row[RowLayout.TOLD] == -0.5
    assert row[RowLayout.LOG_DENSITY] == after.state.logdensity
    assert row[RowLayout.ACCEPTED] == (plan.outcomes[0] == "accepted")
    assert list(RowLayout.positions(row[None, :], meta.dim)[0]) == list(after.state.position)
    assert (after.version, after.draws, after.state.iteration) == (2, 1, 1)


def test_a_retried_transition_needs_its_told_value_then_is_a_duplicate() -> None:
    meta = _meta()
    after = _applied(plan_chain(meta, _initialized(meta), _told(("c0.i1", -0.5))))
    again = plan_chain(meta, after, _told(("c0.i1", -0.5)))
    assert again.missing == {1} and again.update is None
    same = plan_chain(meta, after, _told(("c0.i1", -0.5)), history={1: -0.5})
    assert same.outcomes == {0: "duplicate"} and same.update is None and not same.conflicts
    other = plan_chain(meta, after, _told(("c0.i1", -0.7)), history={1: -0.5})
    assert other.conflicts == (0,) and other.update is None


def test_the_same_id_twice_in_one_request() -> None:
    meta = _meta()
    chain = _initialized(meta)
    same = plan_chain(meta, chain, _told(("c0.i1", -0.5), ("c0.i1", -0.5)))
    assert same.outcomes[1] == "duplicate" and same.update is not None
    other = plan_chain(meta, chain, _told(("c0.i1", -0.5), ("c0.i1", -0.6)))
    assert other.conflicts == (1,)


def test_a_proposal_that_follows_a_transition_of_the_same_request_was_never_issued() -> None:
    meta = _meta()
    chain = _initialized(meta)
    plan = plan_chain(meta, chain, _told(("c0.i1", -0.5), ("c0.i2", -0.5)))
    assert plan.conflicts == (1,)
    # Nor the first proposal after an initial point told in the same request.
    plan = plan_chain(meta, _start(meta), _told(("c0.i0", -1.0), ("c0.i1", -0.5)))
    assert plan.conflicts == (1,)


def test_ids_not_outstanding_are_conflicts() -> None:
    meta = _meta()
    chain = _initialized(meta)
    for text in ("c0.i2", "c0.i7", "c0.e1.i0"):
        plan = plan_chain(meta, chain, _told((text, -1.0)))
        assert plan.conflicts == (0,) and plan.update is None, text
    # Before its initial point is told, a chain has issued no proposal.
    assert plan_chain(meta, _start(meta), _told(("c0.i1", -1.0))).conflicts == (0,)


def test_a_drawn_initial_point_outside_the_support_is_replaced() -> None:
    meta = _meta()
    plan = plan_chain(meta, _start(meta), _told(("c0.i0", -math.inf)))
    after = _applied(plan)
    assert plan.outcomes == {0: "outside_support"}
    assert after.state.epoch == 1 and after.init_value is None and not after.waiting
    assert plan.update is not None and plan.update.active
    # The replaced point told again the same way is a duplicate; otherwise a conflict.
    assert plan_chain(meta, after, _told(("c0.i0", -math.inf))).outcomes == {0: "duplicate"}
    assert plan_chain(meta, after, _told(("c0.i0", -1.0))).conflicts == (0,)


def test_a_given_initial_point_outside_the_support_waits_for_a_reset() -> None:
    meta = _meta(initial_radius=None, initial_center=[[0.5, 0.5]])
    plan = plan_chain(meta, _start(meta), _told(("c0.i0", -math.inf)))
    after = _applied(plan)
    assert after.waiting and plan.update is not None
    assert plan.update.counts.waiting == 1 and not plan.update.active


def test_409_after_another_writer_is_decided_on_the_record_it_wrote() -> None:
    """The branch that used to answer 409 after applying some results: a chain decided on
    a cached state turns out to have moved on. Decided again on the store's record, the
    late result is a conflict; the plans of the other chains are not written (the store
    applies a request's updates all or nothing), so the request applies nothing."""
    meta = _meta(chains=2)
    cached = _initialized(meta)
    # Another process told c0.i1 = -0.5; this one was told -0.9 for it.
    stored = _applied(plan_chain(meta, cached, _told(("c0.i1", -0.5))))
    optimistic = plan_chain(meta, cached, _told(("c0.i1", -0.9)))
    assert optimistic.update is not None and optimistic.update.expected_version == 1
    again = plan_chain(meta, stored, _told(("c0.i1", -0.9)))
    assert again.missing == {1}
    final = plan_chain(meta, stored, _told(("c0.i1", -0.9)), history={1: -0.5})
    assert final.conflicts == (0,) and final.update is None and final.outcomes == {}


def test_the_next_proposal_is_leased_only_to_an_active_chain() -> None:
    meta = _meta(max_iterations=1)
    plan = plan_chain(meta, _initialized(meta), _told(("c0.i1", -0.5)), lease=30.0)
    assert plan.update is not None
    assert plan.update.counts.finished == 1 and not plan.update.active
    assert plan.update.lease_seconds == 0
