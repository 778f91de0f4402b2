"""The state codec (core.interface.codec): stored documents stay readable, and hostile
documents are rejected with CodecError, never another exception."""

from __future__ import annotations

import base64
import builtins
import contextlib
import copy
import dataclasses
import json
import math
import pickle
from typing import Any

import numpy as np
import pytest

from kameleon.core import SAMPLERS
from kameleon.core.interface.codec import ALIASES, MAX_DEPTH, CodecError, from_jsonable, registered
from kameleon.core.interface.documents import decode, encode

# Documents written by the codec when it named classes by their module paths: for each
# sampler, a chain of dimension 2 (warm-up 20, the options given) after 16 transitions
# on the banana log density ``_banana``, with its kernel surrogate fitted and its
# preconditioner fixed, and the position its next ``ask`` proposes. Do not regenerate
# the states: they stand for documents already in stores. "next" is what this code
# proposes from them; the machine-independent arithmetic (core/numerics/arithmetic.py) moved it
# from the writer's proposal in the last bits (the writer's values were those of one
# BLAS kernel, and differed on others); kameleon's moved when its default nugget became
# 0.5 * 2.38 / sqrt(d) in whitened coordinates (its options give no gamma, so the
# decoded chain takes the new default: BENCHMARKS.md section 4, CHANGELOG).
OLD_DOCUMENTS: dict[str, dict[str, Any]] = json.loads(
    r"""
{
 "rwm": {
  "options": {},
  "hot": {"c": "kameleon.core.samplers.rwm.State", "v": {"position": {"a": "f8", "s": [2], "b": "m9IJlYVz87/Q7z3x8VG/Pw=="}, "logdensity": -0.9290798176769991, "iteration": 15, "accepted": 1, "epoch": 0, "seed": 5, "chain": 1, "log_scale": 0.31947094223608874}, "schema_version": 1},
  "cold": {},
  "next": [-1.6091970157255253, -0.9510743668149155]
 },
 "am": {
  "options": {"adapt_start": 5},
  "hot": {"c": "kameleon.core.samplers.am.State", "v": {"position": {"a": "f8", "s": [2], "b": "xlD8IT+Jzr9NSJXE+6C+vw=="}, "logdensity": -0.03942308607997346, "iteration": 15, "accepted": 7, "epoch": 0, "seed": 5, "chain": 1, "log_lambda": 0.9653959355213144}, "schema_version": 1},
  "cold": {"moments": {"c": "kameleon.core.adaptation.Welford", "v": {"count": 15, "mean": {"a": "f8", "s": [2], "b": "U4HffAwu2r+KY1rvmnyzvw=="}, "m2": {"a": "f8", "s": [2, 2], "b": "KPcB64g9IECrvdV9Jc//v6u91X0lz/+/Rw5qlWsn3z8="}}}},
  "next": [-0.832318581729026, 0.021546938978887]
 },
 "kameleon": {
  "options": {"subsample_size": 4, "min_subsample": 2, "precondition_iterations": 6},
  "hot": {"c": "kameleon.core.samplers.kameleon.State", "v": {"position": {"a": "f8", "s": [2], "b": "3fy4IreR9r84SZuGETSRvw=="}, "logdensity": -1.5065901294499766, "iteration": 15, "accepted": 7, "epoch": 0, "seed": 5, "chain": 1, "log_nu2": 1.634631914014383, "history_size": 6, "bandwidth": 0.3284415656757796, "scout_log_lambda": 0.029345938931068953}, "schema_version": 1},
  "cold": {"reservoir": {"a": "f8", "s": [4, 2], "b": "8Ui3sn+Y+r/Z362xfg7yP2u5mGWDFva/aDf3l+M93z8IaiySy873v7WSusqIR9o/21hyEmR/9L+9mdSTw07gPw=="}, "subsample": null, "scout_moments": {"c": "kameleon.core.adaptation.Welford", "v": {"count": 6, "mean": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "m2": {"a": "f8", "s": [2, 2], "b": "JydRIWcNBED+6door6bjv/7p2iivpuO//rIWXgVCwz8="}}}, "scout_factor": {"a": "f8", "s": [2, 2], "b": "KL6G0DKo5j8AAAAAAAAAAFY4nLYhNMa/jZ2Lg8ATMD8="}, "preconditioner": {"c": "kameleon.core.preconditioning.Preconditioner", "v": {"shift": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "factor": {"a": "f8", "s": [2, 2], "b": "J76G0DKo5j8AAAAAAAAAAAAAAAAAAAAADyAgKyM0xj8="}}}},
  "next": [-1.5841078195532283, -0.13146767631802966]
 },
 "kmc-lite": {
  "options": {"num_centres": 4, "min_history": 3, "update_every": 2, "precondition_iterations": 6, "num_steps_min": 1, "num_steps_max": 2},
  "hot": {"c": "kameleon.core.samplers.kmc_lite.State", "v": {"position": {"a": "f8", "s": [2], "b": "xjP6tk8F37/oG1j0HnCQPw=="}, "logdensity": -0.12260904185190204, "iteration": 15, "accepted": 4, "epoch": 0, "seed": 5, "chain": 1, "log_rw_scale": 0.733020137221984, "log_step_size": 0.24189992336592958, "bandwidth": 1.9943067863253152, "scout_log_lambda": 0.07007314671735858, "history_size": 6, "since_fit": 1}, "schema_version": 1},
  "cold": {"scout_moments": {"c": "kameleon.core.adaptation.Welford", "v": {"count": 6, "mean": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "m2": {"a": "f8", "s": [2, 2], "b": "JydRIWcNBED+6door6bjv/7p2iivpuO//rIWXgVCwz8="}}}, "scout_factor": {"a": "f8", "s": [2, 2], "b": "KL6G0DKo5j8AAAAAAAAAAFY4nLYhNMa/jZ2Lg8ATMD8="}, "preconditioner": {"c": "kameleon.core.preconditioning.Preconditioner", "v": {"shift": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "factor": {"a": "f8", "s": [2, 2], "b": "J76G0DKo5j8AAAAAAAAAAAAAAAAAAAAADyAgKyM0xj8="}}}, "reservoir": {"a": "f8", "s": [4, 2], "b": "0wFEHumn9L/TAUQe6af0P6kvEOjVtPG/ag8n4l+o8r88tEDldhTHv6qQptFBM+M/PLRA5XYUx7+qkKbRQTPjPw=="}, "centres": {"a": "f8", "s": [4, 2], "b": "0wFEHumn9L/TAUQe6af0P6kvEOjVtPG/ag8n4l+o8r88tEDldhTHv6qQptFBM+M/PLRA5XYUx7+qkKbRQTPjPw=="}, "alpha": {"a": "f8", "s": [4], "b": "s7KB5lEXB0CZ46qkHwgAQNO9DMAvtwpAr70MwC+3CkA="}},
  "next": [1.1210653977564462, 0.4339145765781899]
 },
 "kmc-finite": {
  "options": {"num_features": 3, "min_history": 3, "update_every": 2, "precondition_iterations": 6, "num_steps_min": 1, "num_steps_max": 2},
  "hot": {"c": "kameleon.core.samplers.kmc_finite.State", "v": {"position": {"a": "f8", "s": [2], "b": "xjP6tk8F37/oG1j0HnCQPw=="}, "logdensity": -0.12260904185190204, "iteration": 15, "accepted": 4, "epoch": 0, "seed": 5, "chain": 1, "log_rw_scale": 0.733020137221984, "log_step_size": 0.9304328393557374, "bandwidth": 2.820375704753963, "scout_log_lambda": 0.07007314671735858, "history_size": 3, "pending": {"a": "f8", "s": [1, 2], "b": "PLRA5XYUx7+qkKbRQTPjPw=="}, "pending_weights": {"a": "f8", "s": [1], "b": "AAAAAAAA8D8="}}, "schema_version": 1},
  "cold": {"scout_moments": {"c": "kameleon.core.adaptation.Welford", "v": {"count": 6, "mean": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "m2": {"a": "f8", "s": [2, 2], "b": "JydRIWcNBED+6door6bjv/7p2iivpuO//rIWXgVCwz8="}}}, "scout_factor": {"a": "f8", "s": [2, 2], "b": "KL6G0DKo5j8AAAAAAAAAAFY4nLYhNMa/jZ2Lg8ATMD8="}, "preconditioner": {"c": "kameleon.core.preconditioning.Preconditioner", "v": {"shift": {"a": "f8", "s": [2], "b": "CS/izJ7Z1r/CpfiMA4m2vw=="}, "factor": {"a": "f8", "s": [2, 2], "b": "J76G0DKo5j8AAAAAAAAAAAAAAAAAAAAADyAgKyM0xj8="}}}, "reservoir": {"a": "f8", "s": [0, 2], "b": ""}, "omega": {"a": "f8", "s": [2, 3], "b": "m1zniqQdg7/V5eLEMJnEv+DYlXbK8LY/YYj2ps3ovL9wVkMKJVy7P/wLE1B7XOs/"}, "phase": {"a": "f8", "s": [3], "b": "5NA+SlbqAkAxSZAvH43hP3E1v2uTmN4/"}, "factor": {"a": "f8", "s": [3, 3], "b": "xtlO4b+4B0BXKVz75U92vzScieROvqm/AAAAAAAAAICnclF7HMIHQAQjGsLqDaE/AAAAAAAAAIAAAAAAAAAAgE2drdum1glA"}, "b": {"a": "f8", "s": [3], "b": "dGeN9v9Ror8qRn1OvA++P1zQOWRSIvk/"}, "theta": {"a": "f8", "s": [3], "b": "RDuhdL2KWL/lr2T0OsyHP1f/oJloQMM/"}},
  "next": [-1.7798912579500716, -0.8369968370818931]
 }
}
"""
)

STABLE_NAMES = {
    "rwm.State",
    "am.State",
    "kameleon.State",
    "kmc-lite.State",
    "kmc-finite.State",
    "adaptation.Welford",
    "preconditioning.Preconditioner",
    "mala.State",
    "sgld.State",
    "hmc.State",
    "nuts.State",
    "nuts.Point",
    "nuts.Trajectory",
    "importance.State",
    "gibbs.State",
    "ensemble.State",
    "tempering.State",
    "smc.State",
    "gradient_check.Check",
    "gradient_warmup.DualAveraging",
    "gradient_warmup.MetricWindow",
}


def _banana(x: Any) -> float:
    return -0.5 * float(x[0] ** 2 + (x[1] - 0.5 * x[0] ** 2) ** 2)


def _old(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = OLD_DOCUMENTS[name]
    return copy.deepcopy(doc["hot"]), copy.deepcopy(doc["cold"])


def _class_names(doc: Any) -> set[str]:
    """Every class a document names."""
    if isinstance(doc, dict):
        own = {doc["c"]} if isinstance(doc.get("c"), str) else set()
        return own.union(*(_class_names(v) for v in doc.values()))
    if isinstance(doc, list | tuple):
        return set().union(*(_class_names(v) for v in doc))
    return set()


# --------------------------------------------------------------------------- names


def test_every_registered_class_has_its_stable_name() -> None:
    # A changed name makes every stored document unreadable: it must fail here. (Test
    # doubles, such as the toy sampler of the service's tests, register names of their
    # own in the same process: only the package's are pinned.)
    ours = {n: c for n, c in registered().items() if c.__module__.startswith("kameleon.")}
    assert set(ours) == STABLE_NAMES
    for name, cls in ours.items():
        assert cls.__codec_name__ == name  # type: ignore[attr-defined]
    assert set(ALIASES.values()) <= STABLE_NAMES


# Samplers added after the stable names had no documents under module paths.
@pytest.mark.parametrize("name", sorted(OLD_DOCUMENTS))
def test_a_document_with_module_path_names_still_decodes(name: str) -> None:
    hot, cold = _old(name)
    assert hot["c"].startswith("kameleon.core.samplers.")  # the old naming, as stored
    sampler = SAMPLERS[name]
    params = sampler.make_params(2, OLD_DOCUMENTS[name]["options"], warmup=20)
    state = decode(hot, cold)
    assert type(state) is sampler.State
    # The decoded chain goes on where it was: its next proposal is this code's, bit for
    # bit, on any machine.
    proposal = sampler.ask(state, params)
    assert proposal.position.tolist() == OLD_DOCUMENTS[name]["next"]
    # And it is written again under the stable names only.
    new_hot, new_cold = encode(state)
    assert new_hot["c"] == f"{name}.State"
    assert _class_names([new_hot, new_cold]) <= STABLE_NAMES
    again = decode(*json.loads(json.dumps([new_hot, new_cold])))
    assert encode(again) == (new_hot, new_cold)


@pytest.mark.parametrize("name", sorted(OLD_DOCUMENTS))
def test_a_document_from_before_the_kameleon_package_decodes(name: str) -> None:
    # Before the distribution installed one package the modules were core.*.
    text = json.dumps(_old(name)).replace('"kameleon.core.', '"core.')
    hot, cold = json.loads(text)
    assert hot["c"].startswith("core.samplers.")
    assert encode(decode(hot, cold)) == encode(decode(*_old(name)))


def test_an_object_named_twice_is_written_the_same_each_time() -> None:
    # encode() writes an array or a dataclass it meets again from its first encoding
    # (a NUTS tree names one point as several of its ends): the document is the one that
    # encoding every field apart gives, and decodes to equal, separate objects.
    from kameleon.core.interface.codec import to_jsonable
    from kameleon.core.samplers import nuts

    params = nuts.make_params(3, {}, warmup=10)
    state = nuts.init(np.array([0.1, -0.2, 0.3]), params, seed=1, chain=0)
    for i in range(200):
        proposal = nuts.ask(state, params)
        x = proposal.position
        state, _ = nuts.tell_gradient(state, params, proposal, -0.5 * float(x @ x), -x)
        if i > 40 and state.trajectory.points == 0:
            break
    # Between transitions the draw's arrays are the finished tree's candidate's.
    assert state.position is state.trajectory.sample.position
    hot, cold = encode(state)
    assert cold  # the warm-up's fields, written apart
    names = [f.name for f in dataclasses.fields(nuts.State)]
    separate = {n: to_jsonable(getattr(state, n)) for n in names}
    whole = {**hot["v"], **cold}
    assert json.dumps(whole, sort_keys=True) == json.dumps(separate, sort_keys=True)
    copy = decode(json.loads(json.dumps(hot)), json.loads(json.dumps(cold)))
    assert encode(copy) == encode(state)


@pytest.mark.parametrize(
    "algorithm",
    [
        "am",
        "kameleon",
        "kmc-lite",
        "nuts",
        "hmc",
        "importance",
        "gibbs",
        "ensemble",
        "tempering",
        "smc",
    ],
)
def test_a_state_written_over_its_predecessor_is_the_document_written_alone(
    algorithm: str,
) -> None:
    # A writer that keeps its states (the service) encodes each one with the encodings of
    # the state before it (``kept``): what a transition left untouched is not encoded
    # again. Every document must be the one a fresh encoding gives, transition after
    # transition, through warm-up and after, hot and cold.
    sampler = SAMPLERS[algorithm]
    params = sampler.make_params(3, {}, warmup=30)
    state = sampler.init(np.array([0.1, -0.2, 0.3]), params, seed=2, chain=1)
    kept = None
    shared = 0
    for _ in range(120):
        memo: dict[int, Any] = {}
        assert encode(state, memo=memo, kept=kept) == encode(state)
        if kept is not None:
            shared += sum(1 for k, v in memo.items() if kept.get(k) is v)
        kept = memo
        proposal = sampler.ask(state, params)
        x = proposal.position
        value = -0.5 * float(x @ x)
        if sampler.evaluation.gradient:
            state, _ = sampler.tell_gradient(state, params, proposal, value, -x)
        else:
            state, _ = sampler.tell(state, params, proposal, value)
    assert shared > 0  # the reuse happened, so the comparison above tested it


def test_an_encoding_is_kept_only_for_the_very_object() -> None:
    # The kept encodings hold their objects: an equal array that is another object, or the
    # same array made writeable (it might have changed since), is encoded afresh.
    from kameleon.core.interface.codec import to_jsonable

    a = np.array([1.0, 2.0])
    a.flags.writeable = False
    memo: dict[int, Any] = {}
    first = to_jsonable(a, memo)
    assert to_jsonable(a, {}, memo) is first
    b = np.array([1.0, 2.0])
    assert to_jsonable(b, {}, memo) is not first
    a.flags.writeable = True
    a[0] = 5.0
    assert to_jsonable(a, {}, memo)["b"] != first["b"]


def test_every_old_document_names_only_aliased_classes() -> None:
    names = set().union(*(_class_names(_old(n)) for n in OLD_DOCUMENTS))
    assert names == {n for n in ALIASES if n.startswith("kameleon.core.")}


# --------------------------------------------------------------------------- rejection


def _old_state_encoded(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A document of the current code: an old one decoded and encoded again."""
    hot, cold = encode(decode(*_old(name)))
    return hot, cold


def _array(values: Any, shape: Any = None, code: str = "f8") -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64 if code == "f8" else np.int64)
    data = base64.b64encode(arr.tobytes()).decode("ascii")
    return {"a": code, "s": list(arr.shape) if shape is None else shape, "b": data}


def _hot_field(field: str, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    hot, cold = _old_state_encoded("rwm")
    hot["v"][field] = value
    return hot, cold


def _nested(depth: int) -> Any:
    doc: Any = 1.0
    for _ in range(depth):
        doc = {"t": [doc]}
    return doc


HOSTILE: dict[str, tuple[Any, Any]] = {
    # the document itself
    "not a mapping": ([], {}),
    "no schema version": ({"c": "rwm.State", "v": {}}, {}),
    "a later schema version": ({**_old_state_encoded("rwm")[0], "schema_version": 2}, {}),
    "a schema version as a string": ({**_old_state_encoded("rwm")[0], "schema_version": "1"}, {}),
    "a schema version as a float": ({**_old_state_encoded("rwm")[0], "schema_version": 1.0}, {}),
    "a schema version as a boolean": ({**_old_state_encoded("rwm")[0], "schema_version": True}, {}),
    "fields not a mapping": ({**_old_state_encoded("rwm")[0], "v": [1, 2]}, {}),
    "cold not a mapping": (_old_state_encoded("am")[0], ["moments"]),
    "a field both hot and cold": (
        _old_state_encoded("rwm")[0],
        {"iteration": 3},
    ),
    # classes
    "an unknown class": ({**_old_state_encoded("rwm")[0], "c": "os.system"}, {}),
    "a builtin": ({**_old_state_encoded("rwm")[0], "c": "builtins.eval"}, {}),
    "an unregistered class of the package": (
        {**_old_state_encoded("rwm")[0], "c": "kameleon.core.samplers.rwm.Params"},
        {},
    ),
    "a class name that is not a string": ({**_old_state_encoded("rwm")[0], "c": ["rwm"]}, {}),
    "a missing field": (
        {**_old_state_encoded("rwm")[0], "v": {"position": _array([0.0, 0.0])}},
        {},
    ),
    "an extra field": _hot_field("__class__", 1),
    "a missing cold field": (_old_state_encoded("am")[0], {}),
    # field types
    "an integer as a string": _hot_field("iteration", "3"),
    "an integer as a boolean": _hot_field("iteration", True),
    "an integer as a float": _hot_field("iteration", 3.0),
    "a float as a string": _hot_field("log_scale", "0.5"),
    "an array as a list": _hot_field("position", [0.0, 1.0]),
    "an array of integers": _hot_field("position", _array([0, 1], code="i8")),
    "a class where an array goes": _hot_field(
        "position",
        {
            "c": "adaptation.Welford",
            "v": {"count": 0, "mean": _array([0.0]), "m2": _array([[0.0]])},
        },
    ),
    "a tuple where an array goes": _hot_field("position", {"t": [0.0, 1.0]}),
    "None where a number goes": _hot_field("iteration", None),
    # floats
    "NaN written as a number": _hot_field("log_scale", math.nan),
    "infinity written as a number": _hot_field("logdensity", math.inf),
    "a finite float written as a string": _hot_field("log_scale", {"f": "1.5"}),
    "a non-finite float spelt otherwise": _hot_field("logdensity", {"f": "-Infinity"}),
    "a non-finite float not a string": _hot_field("logdensity", {"f": -1}),
    # arrays
    "base64 with padding inside": _hot_field(
        "position", {"a": "f8", "s": [2], "b": "AA==" + "A" * 20}
    ),
    "base64 with a bad alphabet": _hot_field("position", {"a": "f8", "s": [2], "b": "*" * 24}),
    "base64 of the wrong length": _hot_field("position", {"a": "f8", "s": [2], "b": "A" * 22}),
    "base64 not a string": _hot_field("position", {"a": "f8", "s": [2], "b": [1, 2]}),
    "data shorter than the shape": _hot_field("position", _array([0.0, 1.0], shape=[3])),
    "data longer than the shape": _hot_field("position", _array([0.0, 1.0, 2.0], shape=[2])),
    "a negative size": _hot_field("position", _array([0.0, 1.0], shape=[-1])),
    "a size as a float": _hot_field("position", _array([0.0, 1.0], shape=[2.0])),
    "a size as a boolean": _hot_field("position", _array([0.0], shape=[True])),
    "a shape not a list": _hot_field("position", _array([0.0, 1.0], shape=2)),
    "too many dimensions": _hot_field("position", _array([0.0], shape=[1] * 40)),
    "a huge shape": _hot_field("position", _array([0.0, 1.0], shape=[10**12])),
    "a huge shape whose product wraps": _hot_field(
        "position", _array([], shape=[2**62, 2**62, 0, 2**62])
    ),
    "an unknown dtype": _hot_field("position", {**_array([0.0, 1.0]), "a": "O"}),
    "a dtype that is not a string": _hot_field("position", {**_array([0.0, 1.0]), "a": ["f8"]}),
    "an array node with an extra key": _hot_field("position", {**_array([0.0, 1.0]), "x": 1}),
    # structure
    "a node of unknown keys": _hot_field("log_scale", {"x": 1}),
    "an empty node": _hot_field("log_scale", {}),
    "a node with two meanings": _hot_field("logdensity", {"f": "inf", "t": []}),
    "a tuple not a list": _hot_field("log_scale", {"t": "ab"}),
    "deeply nested tuples": _hot_field("log_scale", _nested(100_000)),
    "deeply nested classes": (
        {
            **_old_state_encoded("rwm")[0],
            "v": {"position": _nested(MAX_DEPTH + 5)},
        },
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_document_is_rejected_with_codec_error(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the codec must never unpickle or evaluate")

    for module, attribute in [
        (pickle, "loads"),
        (pickle, "load"),
        (builtins, "eval"),
        (builtins, "exec"),
    ]:
        monkeypatch.setattr(module, attribute, forbidden)
    hot, cold = HOSTILE[case]
    with pytest.raises(CodecError):
        decode(hot, cold)


def test_the_valid_documents_the_hostile_ones_come_from_decode() -> None:
    # Each hostile document differs from these in the one way its name says.
    for name in OLD_DOCUMENTS:
        decode(*_old_state_encoded(name))
    assert from_jsonable(_nested(MAX_DEPTH)) is not None


def test_random_corruptions_raise_codec_error_or_decode() -> None:
    """Replace one node of a valid document by a value of another kind, many times: the
    codec decodes or raises CodecError, nothing else (seeded, 2000 cases)."""
    rng = np.random.default_rng(4)
    replacements: list[Any] = [
        None,
        True,
        -1,
        0,
        2**70,
        1.5,
        math.nan,
        math.inf,
        "",
        "x",
        [],
        [1],
        {},
        {"f": "nan"},
        {"t": []},
        {"a": "f8", "s": [], "b": ""},
        {"c": "rwm.State", "v": {}},
        {"c": 1, "v": 1},
    ]
    for _ in range(2000):
        name = sorted(OLD_DOCUMENTS)[int(rng.integers(len(OLD_DOCUMENTS)))]
        doc = [*_old_state_encoded(name)]
        paths = list(_paths(doc))
        path = paths[int(rng.integers(len(paths)))]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = copy.deepcopy(replacements[int(rng.integers(len(replacements)))])
        with contextlib.suppress(CodecError):
            decode(doc[0], doc[1])


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Any:
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))
