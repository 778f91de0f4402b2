"""The ask/tell contract of :mod:`core.interface.sampler`, checked for every sampler in ``SAMPLERS``."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import pkgutil
import struct
import typing
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS, samplers
from kameleon.core.interface.chain import Proposal, reset
from kameleon.core.interface.documents import decode, encode
from kameleon.core.interface.sampler import OptionError
from kameleon.core.running.inprocess import run_chain, sample
from kameleon.core.validation.targets import Gaussian
from tests.core.evaluations import for_sampler, options, tell

TARGET = Gaussian([0.5, -1.0, 0.0], [[1.0, 0.5, 0.0], [0.5, 2.0, 0.3], [0.0, 0.3, 0.5]])
DIM = TARGET.dim
WARMUP = 150
SEED = 2024
START = np.array([0.3, -0.7, 0.2])
# Iterations of the states checked: mid-warm-up, and after warm-up.
MID_WARMUP, POST_WARMUP = 120, 170
# Settable options are every field of Params except these, fixed by the session.
FIXED_FIELDS = {"dim", "warmup"}


@pytest.fixture(params=sorted(SAMPLERS))
def name(request: pytest.FixtureRequest) -> str:
    """Each registered sampler in turn."""
    return str(request.param)


def _params(sampler: ModuleType, warmup: int = WARMUP) -> Any:
    return sampler.make_params(DIM, options(sampler.name), warmup=warmup)


def _chain(sampler: ModuleType, params: Any, *, seed: int = SEED) -> Iterator[Any]:
    """The states of a chain on ``TARGET``: before its initial tell, then after each tell."""
    state = sampler.init(START, params, seed=seed, chain=1)
    yield state
    while True:
        proposal = sampler.ask(state, params)
        state, _ = _tell(sampler, state, params, proposal, TARGET.logdensity(proposal.position))
        yield state


def _states_at(sampler: ModuleType, params: Any, *iterations: int) -> list[Any]:
    """Initialised states at the given iterations (0: just after the initial tell)."""
    wanted, found = set(iterations), {}
    for state in _chain(sampler, params):
        if state.logdensity is not None and state.iteration in wanted:
            found[state.iteration] = state
            if len(found) == len(wanted):
                return [found[i] for i in iterations]
    raise AssertionError("unreachable")  # pragma: no cover


def _arrays(value: Any) -> Iterator[np.ndarray]:
    """Every numpy array inside a state, a proposal or a nested value."""
    if isinstance(value, np.ndarray):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _arrays(getattr(value, field.name))
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _arrays(item)


def _assert_identical(a: Any, b: Any, path: str = "state") -> None:
    """``a`` and ``b`` are equal field by field, floats and arrays bit for bit."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), path
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        assert a.tobytes() == b.tobytes(), path
    elif isinstance(a, float):
        assert isinstance(b, float), path
        assert struct.pack("<d", a) == struct.pack("<d", b), path
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), path
        for field in dataclasses.fields(a):
            _assert_identical(
                getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}"
            )
    elif isinstance(a, tuple | list):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_identical(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, path


def _tell(sampler: Any, state: Any, params: Any, proposal: Proposal, value: float) -> Any:
    """``sampler``'s tell, with ``TARGET``'s gradient for a sampler that needs one."""
    return tell(sampler, state, params, proposal, value, TARGET.logdensity)


def _encoded(state: Any) -> str:
    hot, cold = encode(state)
    return json.dumps([hot, cold], sort_keys=True)


def _round_trip(state: Any) -> Any:
    hot, cold = json.loads(json.dumps(encode(state)))
    return decode(hot, cold)


# --------------------------------------------------------------------------- ask


def test_ask_is_pure(name: str) -> None:
    sampler = SAMPLERS[name]
    _ask_is_pure(sampler, _params(sampler))


def _ask_is_pure(sampler: Any, params: Any) -> None:
    for state in _states_at(sampler, params, 0, MID_WARMUP, POST_WARMUP):
        before = _encoded(state)
        first, second = sampler.ask(state, params), sampler.ask(state, params)
        _assert_identical(first, second, "proposal")
        # A Hamiltonian sampler's transition starts with a point of its trajectory.
        # SGLD's evaluates a minibatch at the current point; parallel tempering's begins
        # with its hottest rung's proposal.
        assert first.kind in ("proposal", "leapfrog", "minibatch", "tempered")
        assert first.iteration == state.iteration + 1
        assert first.position.shape == (DIM,) and not first.position.flags.writeable
        assert _encoded(state) == before


# --------------------------------------------------------------------------- tell


def test_tell_never_mutates_its_inputs(name: str) -> None:
    sampler = SAMPLERS[name]
    _tell_never_mutates_its_inputs(sampler, _params(sampler))


def _tell_never_mutates_its_inputs(sampler: Any, params: Any) -> None:
    init_state = sampler.init(START, params, seed=SEED, chain=1)
    for state in [init_state, *_states_at(sampler, params, 0, MID_WARMUP, POST_WARMUP)]:
        proposal = sampler.ask(state, params)
        before = _encoded(state), proposal.position.tobytes()
        new, _ = _tell(sampler, state, params, proposal, TARGET.logdensity(proposal.position))
        assert (_encoded(state), proposal.position.tobytes()) == before
        for arr in [*_arrays(state), *_arrays(proposal), *_arrays(new)]:
            assert not arr.flags.writeable


def test_tell_rejects_a_proposal_of_another_iteration(name: str) -> None:
    sampler = SAMPLERS[name]
    params = _params(sampler)
    state = _states_at(sampler, params, 0)[0]
    old_proposal = sampler.ask(state, params)
    newer, _ = _tell(sampler, state, params, old_proposal, TARGET.logdensity(old_proposal.position))
    new_proposal = sampler.ask(newer, params)
    with pytest.raises(ValueError):
        _tell(sampler, newer, params, old_proposal, 0.0)
    with pytest.raises(ValueError):
        _tell(sampler, state, params, new_proposal, 0.0)
    with pytest.raises(ValueError):  # an initial point for a chain that has one
        _tell(sampler, newer, params, Proposal(newer.iteration, "init", newer.position), 0.0)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_tell_rejects_nan_and_plus_infinity(name: str, value: float) -> None:
    sampler = SAMPLERS[name]
    params = _params(sampler)
    state = _states_at(sampler, params, 0)[0]
    with pytest.raises(ValueError):
        _tell(sampler, state, params, sampler.ask(state, params), value)


def test_minus_infinity_at_the_initial_point_waits_for_a_new_one(name: str) -> None:
    sampler = SAMPLERS[name]
    params = _params(sampler)
    state = sampler.init(START, params, seed=SEED, chain=1)
    proposal = sampler.ask(state, params)
    assert proposal.kind == "init"
    same, info = _tell(sampler, state, params, proposal, -math.inf)
    assert info.outcome == "outside_support"
    assert _encoded(same) == _encoded(state)
    new_start = np.array([1.0, 2.0, 3.0])
    restarted = reset(same, new_start)
    proposal = sampler.ask(restarted, params)
    assert proposal.kind == "init" and proposal.position.tolist() == new_start.tolist()
    started, info = _tell(sampler, restarted, params, proposal, TARGET.logdensity(new_start))
    assert info.outcome == "initialized"
    assert started.epoch == 1 and started.logdensity == TARGET.logdensity(new_start)


def test_a_proposal_outside_the_support_is_rejected(name: str) -> None:
    sampler = SAMPLERS[name]
    params = _params(sampler)
    state = _states_at(sampler, params, 0)[0]
    new, info = _tell(sampler, state, params, sampler.ask(state, params), -math.inf)
    while info.outcome == "step" and SAMPLERS[name].multistep:
        # Parallel tempering: every rung's point is rejected in turn, the cold one's last.
        assert info.acceptance_probability == 0.0
        new, info = _tell(sampler, new, params, sampler.ask(new, params), -math.inf)
    assert info.outcome == "rejected" and info.acceptance_probability == 0.0
    assert new.position.tobytes() == state.position.tobytes()
    assert new.logdensity == state.logdensity
    if info.outcome == "step":  # a block of a gibbs sweep: the sweep goes on, unmoved
        assert sampler.multistep and (new.iteration, new.accepted) == (
            state.iteration,
            state.accepted,
        )
        return
    assert (new.iteration, new.accepted) == (state.iteration + 1, state.accepted)


# --------------------------------------------------------------------------- options


def test_unknown_option_is_refused(name: str) -> None:
    with pytest.raises(OptionError) as excinfo:
        SAMPLERS[name].make_params(DIM, {"no_such_option": 1}, warmup=WARMUP)
    assert excinfo.value.option == "no_such_option"


def _accepts_strings(annotation: Any) -> bool:
    if annotation is str or typing.get_origin(annotation) is typing.Literal:
        return True
    return any(_accepts_strings(arg) for arg in typing.get_args(annotation))


def test_options_of_the_wrong_type_are_refused(name: str) -> None:
    sampler = SAMPLERS[name]
    hints = typing.get_type_hints(sampler.Params)
    options = [
        f.name for f in dataclasses.fields(sampler.Params) if f.init and f.name not in FIXED_FIELDS
    ]
    assert options, "a sampler with no options"
    for option in options:
        wrong_values: list[Any] = [[1.0], {"a": 1}]
        if not _accepts_strings(hints[option]):
            wrong_values.append("1")
        for value in wrong_values:
            with pytest.raises(OptionError) as excinfo:
                sampler.make_params(DIM, {option: value}, warmup=WARMUP)
            # A list option names the offending entry by its path (gibbs's blocks.0).
            assert excinfo.value.option.split(".")[0] == option


#: Options that have no default: a session must give them (sgld's number of data points).
REQUIRED = {"sgld": {"data_size": 10}}


def test_every_option_has_a_default(name: str) -> None:
    # Every option but the required ones; leaving out a required one is an OptionError
    # that names it.
    required = REQUIRED.get(name, {})
    params = SAMPLERS[name].make_params(DIM, dict(required), warmup=WARMUP)
    assert (params.dim, params.warmup) == (DIM, WARMUP)
    for option in required:
        with pytest.raises(OptionError) as excinfo:
            SAMPLERS[name].make_params(DIM, {}, warmup=WARMUP)
        assert excinfo.value.option == option


# --------------------------------------------------------------------------- codec and replay


def test_codec_round_trip_is_exact(name: str) -> None:
    sampler = SAMPLERS[name]
    _codec_round_trip_is_exact(sampler, _params(sampler))


def _codec_round_trip_is_exact(sampler: Any, params: Any) -> None:
    init_state = sampler.init(START, params, seed=SEED, chain=1)
    for state in [init_state, *_states_at(sampler, params, 0, MID_WARMUP, POST_WARMUP)]:
        decoded = _round_trip(state)
        _assert_identical(state, decoded)
        assert all(not arr.flags.writeable for arr in _arrays(decoded))
        # The decoded state behaves the same: same proposal.
        _assert_identical(sampler.ask(state, params), sampler.ask(decoded, params), "proposal")


def test_replay_from_seed_and_told_values_is_bit_for_bit(name: str) -> None:
    sampler = SAMPLERS[name]
    _replay_is_bit_for_bit(sampler, _params(sampler))


def _replay_is_bit_for_bit(sampler: Any, params: Any) -> None:
    n = POST_WARMUP
    first = run_chain(
        sampler, params, for_sampler(sampler, TARGET.logdensity), START, n, seed=SEED, chain=3
    )
    # Replay: the same told values (the target's, at each point asked; a transition may
    # take several), through the codec after every tell (as a service that stores the
    # state between requests would).
    state = sampler.init(START, params, seed=SEED, chain=3)
    draws, told = [], []
    while len(draws) < n + 1:
        proposal = sampler.ask(_round_trip(state), params)
        value = TARGET.logdensity(proposal.position)
        state, info = _tell(sampler, _round_trip(state), params, proposal, value)
        if info.outcome != "step":
            draws.append(state.position)
            told.append(value)
    assert np.stack(draws[1:]).tobytes() == first.draws.tobytes()
    assert told[1:] == first.told.tolist()
    _assert_identical(state, first.state)
    # A different seed gives a different chain.
    other = run_chain(
        sampler, params, for_sampler(sampler, TARGET.logdensity), START, n, seed=SEED + 1, chain=3
    )
    assert other.draws.tobytes() != first.draws.tobytes()


def test_state_size_does_not_grow_after_warmup(name: str) -> None:
    sampler = SAMPLERS[name]
    params = _params(sampler, warmup=100)
    early, late = _states_at(sampler, params, 200, 2000)

    def shapes(doc: Any, path: str = "") -> dict[str, Any]:
        """Shape of every encoded array, by its path in the document."""
        if isinstance(doc, dict):
            if "a" in doc:
                return {path: doc["s"]}
            return {
                k: v for key, item in doc.items() for k, v in shapes(item, f"{path}/{key}").items()
            }
        return {}

    (early_hot, early_cold), (late_hot, late_cold) = encode(early), encode(late)
    if name == "nuts":
        # A tree's checkpoints have as many rows as its depth uses: bounded by
        # max_tree_depth, not by the transitions done. Compared apart from the rest.
        for hot in (early_hot, late_hot):
            tree = hot["v"]["trajectory"]["v"]
            for key in ("checkpoint_momentum", "checkpoint_sum", "checkpoint_previous"):
                rows, cols = tree.pop(key)["s"]
                assert rows <= params.max_tree_depth and cols == DIM
    assert shapes(early_hot) == shapes(late_hot)
    assert shapes(early_cold) == shapes(late_cold)
    # Besides arrays of the same shapes, only the digits of counters and floats may differ.
    assert abs(len(json.dumps(late_hot)) - len(json.dumps(early_hot))) < 100
    assert len(json.dumps(late_cold)) == len(json.dumps(early_cold))


# --------------------------------------------------------------------------- the Python API


def test_sample_returns_post_warmup_draws_per_chain(name: str) -> None:
    draws = sample(
        for_sampler(SAMPLERS[name], TARGET.logdensity),
        DIM,
        algorithm=name,
        chains=2,
        iterations=30,
        warmup=20,
        initial=START,
        seed=5,
        options=options(name),
        warn=False,  # 30 draws are too few to pass the convergence checks
    )
    assert draws.shape == (2, 30, DIM) and np.all(np.isfinite(draws))
    # The same chain as run_chain's, warm-up dropped.
    params = SAMPLERS[name].make_params(DIM, options(name), warmup=20)
    chain_1 = run_chain(
        SAMPLERS[name],
        params,
        for_sampler(SAMPLERS[name], TARGET.logdensity),
        START,
        50,
        seed=5,
        chain=1,
    )
    assert draws[1].tobytes() == chain_1.draws[20:].tobytes()
    assert draws[0].tobytes() != draws[1].tobytes()


def test_sample_refuses_an_unknown_algorithm() -> None:
    with pytest.raises(ValueError, match="unknown algorithm"):
        sample(TARGET.logdensity, DIM, algorithm="no-such-sampler")


def test_run_chain_refuses_an_initial_point_outside_the_support(name: str) -> None:
    sampler = SAMPLERS[name]
    with pytest.raises(ValueError, match="initial point"):
        run_chain(
            sampler,
            _params(sampler),
            for_sampler(sampler, lambda x: -math.inf),
            START,
            5,
            seed=0,
            chain=0,
        )


# --------------------------------------------------------------------------- registry


def test_the_samplers_package_holds_the_registered_samplers_only() -> None:
    modules = {info.name for info in pkgutil.iter_modules(samplers.__path__)}
    records = {}
    for module_name in modules:
        module = importlib.import_module(f"{samplers.__name__}.{module_name}")
        records[module.NAME] = module.SAMPLER
        # The record is the module's own parts.
        record = module.SAMPLER
        assert (record.name, record.Params, record.State) == (
            module.NAME,
            module.Params,
            module.State,
        )
        for part in ("make_params", "init", "ask", "tell", "chain_floats"):
            assert getattr(record, part) is getattr(module, part), (module_name, part)
    assert records == SAMPLERS


# --------------------------------------------------------------------------- variants

#: Options that change how a sampler's transitions run, put through the contract's
#: purity, codec and replay checks on their own (the tests above run the defaults):
#: ``smc``'s waste-free stages, whose moves set other particles than they move from.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {"smc-waste-free": ("smc", {"waste_free": 4})}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """A sampler and its params with a variant's options."""
    name, extra = VARIANTS[str(request.param)]
    sampler = SAMPLERS[name]
    return sampler, sampler.make_params(DIM, options(name, **extra), warmup=WARMUP)


def test_a_variant_asks_purely(variant: tuple[Any, Any]) -> None:
    _ask_is_pure(*variant)


def test_a_variant_never_mutates_its_inputs(variant: tuple[Any, Any]) -> None:
    _tell_never_mutates_its_inputs(*variant)


def test_a_variant_goes_through_the_codec_exactly(variant: tuple[Any, Any]) -> None:
    _codec_round_trip_is_exact(*variant)


def test_a_variant_replays_bit_for_bit(variant: tuple[Any, Any]) -> None:
    _replay_is_bit_for_bit(*variant)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_evolve_is_replace_for_every_state(name: str) -> None:
    """``evolve`` copies through the fields' slots (a layout per class): the same state
    as ``dataclasses.replace``, of the same class, and an unknown field refused."""
    sampler = SAMPLERS[name]
    params = sampler.make_params(3, options(name), warmup=10)
    state = sampler.init(np.full(3, 0.5), params, seed=2, chain=1)
    changed = state.evolve(iteration=7, accepted=3)
    expected = dataclasses.replace(state, iteration=7, accepted=3)
    assert type(changed) is type(expected)
    for field in dataclasses.fields(expected):
        a, b = getattr(changed, field.name), getattr(expected, field.name)
        assert a is b or a == b, field.name
    with pytest.raises(TypeError, match="no field"):
        state.evolve(nonsense=1)


def test_records_made_at_every_evaluation_keep_their_dataclass_init() -> None:
    """``Proposal`` and ``StepInfo`` fill their slots through ``slot_init``: the same
    signature and defaults as the dataclass's own ``__init__``, and still frozen."""
    from kameleon.core.interface.chain import StepInfo, slot_init

    for cls in (Proposal, StepInfo):
        plain = dataclasses.make_dataclass(
            cls.__name__,
            [(f.name, f.type, f) for f in dataclasses.fields(cls)],
            frozen=True,
            slots=True,
        )
        ours, theirs = inspect.signature(cls), inspect.signature(plain)
        assert [(q.name, q.kind, q.default) for q in ours.parameters.values()] == [
            (q.name, q.kind, q.default) for q in theirs.parameters.values()
        ]
    p = Proposal(3, "proposal", np.zeros(2), step=2, block=1)
    assert (p.iteration, p.kind, p.log_correction, p.step, p.minibatch, p.block) == (
        3,
        "proposal",
        0.0,
        2,
        None,
        1,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.step = 3  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="plain fields"):
        slot_init(WithFactory)
