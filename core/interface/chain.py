"""What every chain is made of: the state fields every sampler's chain has
(:class:`ChainState`, read-only float64 arrays, :func:`frozen_array`), what ``ask``
hands out (:class:`Proposal`), what ``tell`` says it did (:class:`StepInfo`), a result
told in parts (:class:`Parts`), and a chain's fresh start (:func:`new_chain_fields`,
:func:`reset`). The sampler interface built on them is :mod:`core.interface.sampler`.
"""

from __future__ import annotations

import dataclasses
import operator
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "ChainParams",
    "ChainState",
    "FloatArray",
    "Outcome",
    "Parts",
    "Proposal",
    "ProposalKind",
    "StepInfo",
    "frozen_array",
    "new_chain_fields",
    "reset",
]

FloatArray = npt.NDArray[np.float64]


Outcome = Literal["initialized", "outside_support", "accepted", "rejected", "step"]
"""What a tell did: ``"step"`` is an intermediate evaluation of a transition that needs
several (a leapfrog point of an HMC trajectory, a point of a gradient check): the chain
made no transition and records no draw."""


ProposalKind = Literal[
    "init", "proposal", "leapfrog", "gradient_check", "minibatch", "conditional", "tempered"
]


def frozen_array(values: Any) -> FloatArray:
    """A read-only float64 copy of ``values``."""
    arr = np.array(values, dtype=np.float64)
    arr.flags.writeable = False
    return arr


_Record = TypeVar("_Record")


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The field's slot's setter (which a frozen class's ``__setattr__`` does not
    guard), or ``object.__setattr__`` for a class without slots."""
    slot = getattr(cls, name, None)
    if isinstance(slot, types.MemberDescriptorType):
        return slot.__set__
    return lambda obj, value: object.__setattr__(obj, name, value)


def slot_init(cls: type[_Record]) -> type[_Record]:
    """Give a frozen, slotted dataclass an ``__init__`` that fills its slots through
    their descriptors: the generated one calls ``object.__setattr__`` per field (which
    a frozen class needs around its own ``__setattr__``), about five times slower for a
    record of eight fields, and records like :class:`Proposal` are made at every
    evaluation. The same signature and defaults; for records without default factories
    or ``__post_init__``."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or any(
        f.default_factory is not dataclasses.MISSING or not f.init or f.kw_only for f in fields
    ):
        raise TypeError(f"{cls.__name__}: slot_init takes plain fields only")
    names = {f"_set_{f.name}": _setter(cls, f.name) for f in fields}
    defaults = {f"_default_{f.name}": f.default for f in fields}
    params = ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}"
        for f in fields
    )
    body = "".join(f"    _set_{f.name}(self, {f.name})\n" for f in fields)
    namespace: dict[str, Any] = {**names, **defaults}
    # Generated as dataclasses generates its own, from the fields alone.
    exec(f"def __init__(self, {params}):\n{body}", namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@slot_init
@dataclass(frozen=True, slots=True)
class Proposal:
    """A point that a chain needs evaluated.

    Attributes
    ----------
    iteration
        The iteration this proposal belongs to; 0 is the chain's initial point.
    kind
        ``"init"`` for the initial point, ``"proposal"`` for a Metropolis-Hastings
        proposal (the last evaluation of a transition); a transition that needs several
        evaluations hands out the ones before its last as ``"leapfrog"`` (a point of a
        Hamiltonian trajectory) or ``"gradient_check"`` (a point of the finite-difference
        check of a told gradient); ``gibbs`` hands out each block's Metropolis-Hastings
        update as ``"proposal"`` (the outcome ``"step"`` says the sweep goes on), and a
        block that the client draws from its full conditional as ``"conditional"``, at
        the chain's current point (``block``, ``indices``); ``tempering`` hands out its
        hot rungs' proposals as ``"tempered"``.
    position
        The point, shape ``(dim,)``.
    log_correction
        Everything in the log acceptance ratio that is not the target, where it is
        known before the point is evaluated: for an asymmetric proposal
        ``log q(x | x*) - log q(x* | x)``, for the kernel samplers' surrogate HMC the
        change in the momentum's log density. Zero for symmetric proposals, and for
        the gradient samplers, whose corrections need the gradient at the point and are
        computed when it is told.
    step
        The evaluation's place in its transition, from 0: a transition's evaluations
        are handed out one at a time, each after the one before it is told. 0 for every
        proposal of a sampler that evaluates once per transition.
    minibatch
        The indices of the data points whose log likelihood is asked for, sorted
        (``sgld``, :class:`core.interface.sampler.Evaluation` ``parts``); ``None`` for the whole target.
    block, indices
        For a ``"conditional"`` proposal (``gibbs``): the block whose coordinates the
        client draws from their full conditional, by its place in the sampler's blocks,
        and its coordinates (from 0, in the block's order); ``None`` otherwise.
    """

    iteration: int
    kind: ProposalKind
    position: FloatArray
    log_correction: float = 0.0
    step: int = 0
    minibatch: tuple[int, ...] | None = None
    block: int | None = None
    indices: tuple[int, ...] | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class StepInfo:
    """What one ``tell`` did; returned, never carried in the state."""

    iteration: int
    outcome: Outcome
    acceptance_probability: float
    is_warmup: bool


@dataclass(frozen=True, slots=True)
class ChainState:
    """The fields every sampler's ``State`` has: each ``State`` is a subclass that adds
    its own (see :func:`new_chain_fields` for a new chain's values)."""

    position: FloatArray
    logdensity: float | None  # None: the initial point is not evaluated yet
    iteration: int  # transitions done; draws recorded
    accepted: int  # accepted transitions
    epoch: int  # times a new initial point was set
    seed: int
    chain: int

    def evolve(self, **changes: Any) -> Any:
        """A copy with ``changes``: :func:`dataclasses.replace` without its checks (a
        sampler's state has no init-only fields, and one with a ``__post_init__`` goes
        through ``replace``), through each field's slot, which counts at every
        transition (an 8-field state: 1.6 us, against 4 us by ``object.__setattr__``)."""
        cls = type(self)
        layout = _LAYOUTS.get(cls)
        if layout is None:
            layout = _LAYOUTS[cls] = _Layout.of(cls)
        if layout.checked:  # a state that checks itself: let it
            return dataclasses.replace(self, **changes)
        values = list(layout.values(self))
        index = layout.index
        for name, value in changes.items():
            at = index.get(name)
            if at is None:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
            values[at] = value
        new = object.__new__(cls)
        for set_field, value in zip(layout.setters, values, strict=True):
            set_field(new, value)
        return new


@dataclass(frozen=True, slots=True)
class _Layout:
    """How :meth:`ChainState.evolve` copies a state class: its fields' getter, their
    places, and their slots' setters."""

    checked: bool  # the class has a __post_init__
    values: Callable[[Any], tuple[Any, ...]]
    index: dict[str, int]
    setters: tuple[Callable[[Any, Any], None], ...]

    @staticmethod
    def of(cls: type) -> _Layout:
        names = tuple(f.name for f in dataclasses.fields(cls))
        return _Layout(
            checked=hasattr(cls, "__post_init__"),
            values=operator.attrgetter(*names) if len(names) > 1 else _one(names[0]),
            index={name: i for i, name in enumerate(names)},
            setters=tuple(_setter(cls, name) for name in names),
        )


def _one(name: str) -> Callable[[Any], tuple[Any, ...]]:
    get = operator.attrgetter(name)
    return lambda obj: (get(obj),)


_LAYOUTS: dict[type, _Layout] = {}


class ChainParams(Protocol):
    """What every sampler's ``Params`` has: the values the session fixes."""

    @property
    def dim(self) -> int: ...

    @property
    def warmup(self) -> int: ...


S = TypeVar("S", bound=ChainState)


P = TypeVar("P", bound=ChainParams)


@dataclass(frozen=True, slots=True)
class Parts:
    """A target told in parts, at a point and for a minibatch of data (``sgld``).

    Attributes
    ----------
    log_prior
        The log prior density at the point (``-inf``: outside the support).
    log_likelihood
        The minibatch's log likelihood: the sum over its data points, not scaled.
    prior_gradient
        The log prior's gradient at the point, shape ``(dim,)``.
    likelihood_gradient
        The minibatch log likelihood's gradient (the sum over its points), ``(dim,)``.
    """

    log_prior: float
    log_likelihood: float
    prior_gradient: FloatArray
    likelihood_gradient: FloatArray


def new_chain_fields(position: Any, *, seed: int, chain: int) -> dict[str, Any]:
    """The :class:`ChainState` fields of a chain waiting for its initial point to be
    evaluated; a sampler's ``init`` adds its own fields."""
    return {
        "position": frozen_array(position),
        "logdensity": None,
        "iteration": 0,
        "accepted": 0,
        "epoch": 0,
        "seed": seed,
        "chain": chain,
    }


def reset(state: Any, position: Any) -> Any:
    """Give a chain a new initial point; its adaptation is kept, its epoch bumped."""
    pos = frozen_array(position)
    if pos.shape != state.position.shape:
        raise ValueError(f"position must have shape {state.position.shape}")
    return dataclasses.replace(state, position=pos, logdensity=None, epoch=state.epoch + 1)
