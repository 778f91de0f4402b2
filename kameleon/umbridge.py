"""``kameleon drive-umbridge``: evaluate a session's proposals on a UM-Bridge model.

UM-Bridge (https://um-bridge-benchmarks.readthedocs.io) serves numerical models over
HTTP, from containers, in any language. This driver connects a Kameleon session to one:
``--concurrency`` threads each ask the session for proposals (a long poll when none is
free), evaluate the model at each point, and tell the results, until the session is
done. The model's output is the log density: the first entry of its first output
vector. A model error, or an output that is NaN or +inf, is told as -inf (outside the
support) with a warning, so one bad point never stops a run; -inf itself is told as
such. Leases make a crashed driver's work reappear for the next one.

An algorithm that uses gradients (``mala``, ``hmc``, ``nuts``) needs the model's
gradient: the driver tells, with each log density, the gradient of that output with
respect to the input, ``model.gradient(0, 0, [x], [1.0], config)`` (UM-Bridge's
``Gradient``, with sensitivity 1). A model that does not support ``Gradient`` is
refused before anything is created. Every evaluation a transition needs (kinds
``leapfrog``, ``gradient_check``) is evaluated the same way; a gradient that fails or is
not finite is told as -inf, with a warning, like a failed evaluation.

A model gives one value per point, so a session that asks for more is refused before
anything is evaluated: ``sgld`` (a minibatch's log likelihood and the log prior apart),
``tempering`` and ``smc`` with ``"tempered": "likelihood"`` (the log prior and the log
likelihood apart), and ``gibbs`` with a ``conditional`` block (the client's draw from a
full conditional). Drive those with a client of your own (PROTOCOL.md).

Needs the ``umbridge`` package (``pip install 'kameleon[umbridge]'``).
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = [
    "add_command",
    "drive",
    "log_density_and_gradient_of",
    "log_density_of",
    "needs_gradient",
    "unanswerable",
]

log = logging.getLogger("kameleon.umbridge")


def add_command(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "drive-umbridge",
        help="evaluate a session's proposals on a UM-Bridge model server",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--model-url", required=True, help="the UM-Bridge server, http://host:port")
    p.add_argument("--model", default="forward", help="the model's name (default: forward)")
    p.add_argument("--model-config", default="{}", help="the model's config, as JSON")
    p.add_argument("--session", help="an existing session; without it, one is created")
    p.add_argument("--dim", type=int, help="for a new session (default: the model's inputs)")
    p.add_argument("--algorithm", default="am")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--iterations", type=int, default=2000, help="draws after warm-up")
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--pseudo-marginal", action="store_true")
    p.add_argument("--concurrency", type=int, default=1, help="model evaluations at once")
    p.add_argument("--lease-seconds", type=float, default=600.0)
    client_options(p)


def log_density_of(model: Any, x: list[float], config: dict[str, Any]) -> float | None:
    """The model's log density at ``x``; ``None`` (told as -inf) when the model fails or
    answers NaN or +inf, with a warning."""
    try:
        value = float(model([list(x)], config)[0][0])
    except Exception as exc:  # the model's own failure: a point to reject, not a crash
        log.warning("the model failed at %s (%s); told as -inf", x, exc)
        return None
    if math.isnan(value) or value == math.inf:
        log.warning("the model answered %s at %s; told as -inf", value, x)
        return None
    return value if value != -math.inf else None


def log_density_and_gradient_of(
    model: Any, x: list[float], config: dict[str, Any]
) -> tuple[float | None, list[float] | None]:
    """The model's log density at ``x`` and its gradient there (the gradient of output
    0 with respect to input 0, sensitivity 1); ``(None, None)`` (told as -inf), with a
    warning, when either fails or is not finite. Outside the support, no gradient."""
    value = log_density_of(model, x, config)
    if value is None:
        return None, None
    try:
        gradient = [float(g) for g in model.gradient(0, 0, [list(x)], [1.0], config)]
    except Exception as exc:
        log.warning("the model's gradient failed at %s (%s); told as -inf", x, exc)
        return None, None
    if len(gradient) != len(x) or not all(math.isfinite(g) for g in gradient):
        log.warning("the model's gradient at %s is %s; told as -inf", x, gradient)
        return None, None
    return value, gradient


def needs_gradient(algorithm: str) -> bool:
    """Whether a session of ``algorithm`` needs the gradient with every result."""
    from kameleon.core import SAMPLERS

    sampler = SAMPLERS.get(algorithm)
    if sampler is None:  # a service newer than this client: go by the name
        return algorithm in ("mala", "hmc", "nuts")
    return bool(sampler.evaluation.gradient)


def unanswerable(algorithm: str, options: dict[str, Any]) -> str | None:
    """Why a model that gives one log density per point cannot answer the asks of a
    session of ``algorithm`` with ``options`` (as PROTOCOL.md documents them), or
    ``None`` when it can."""
    from kameleon.core import SAMPLERS

    sampler = SAMPLERS.get(algorithm)
    if sampler is not None and sampler.evaluation.parts:
        return f"{algorithm} asks for a minibatch's log likelihood and the log prior apart"
    if algorithm in ("tempering", "smc") and options.get("tempered") == "likelihood":
        return f'{algorithm} with "tempered": "likelihood" needs the log prior and the log likelihood apart'
    blocks = options.get("blocks") if algorithm == "gibbs" else None
    if isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("conditional") for b in blocks
    ):
        return "gibbs with a conditional block asks for draws from the block's full conditional"
    return None


def _check_answerable(algorithm: str, options: dict[str, Any]) -> None:
    why = unanswerable(algorithm, options)
    if why is not None:
        raise ValueError(
            f"a UM-Bridge model gives one log density per point, and {why}: drive this "
            "session with a client of your own (PROTOCOL.md)"
        )


def _check_gradient(model: Any, args: argparse.Namespace, algorithm: str) -> None:
    """Fail early when the algorithm needs a gradient that the model does not give."""
    if needs_gradient(algorithm) and not model.supports_gradient():
        raise ValueError(
            f"the algorithm {algorithm!r} needs the log density's gradient, and the UM-Bridge "
            f"model {args.model!r} at {args.model_url} does not support Gradient: give the "
            "model a gradient, or choose a gradient-free algorithm (e.g. --algorithm am)"
        )


def _model(args: argparse.Namespace) -> Any:
    try:
        import umbridge  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "drive-umbridge needs the umbridge package: pip install 'kameleon[umbridge]'"
        ) from None
    try:
        return umbridge.HTTPModel(args.model_url, args.model)
    except Exception as exc:
        raise OSError(f"no UM-Bridge model {args.model!r} at {args.model_url}: {exc}") from None


def drive(args: argparse.Namespace) -> int:
    import json

    from kameleon.client import Client

    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    try:
        config = json.loads(args.model_config)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model-config is not JSON: {exc}") from None
    model = _model(args)
    inputs = int(sum(model.get_input_sizes(config)))
    if args.session is None:
        _check_gradient(model, args, args.algorithm)  # before a session is created
    with Client(args.url, api_key=args.api_key) as client:
        session = _session(client, args, inputs)
        _check_answerable(session.algorithm, session.options)
        _check_gradient(model, args, session.algorithm)
        gradients = needs_gradient(session.algorithm)
        print(f"session {session.id}", flush=True)
        counts = {"evaluations": 0, "outside": 0}
        lock = threading.Lock()

        def evaluate(x: Any) -> float | tuple[float | None, list[float] | None] | None:
            gradient = None
            if gradients:
                value, gradient = log_density_and_gradient_of(model, x, config)
            else:
                value = log_density_of(model, x, config)
            with lock:
                counts["evaluations"] += 1
                counts["outside"] += value is None
            return (value, gradient) if gradients else value

        with ThreadPoolExecutor(args.concurrency) as pool:
            workers = [
                pool.submit(_worker, client, session.id, evaluate, args.lease_seconds)
                for _ in range(args.concurrency)
            ]
            for future in workers:
                future.result()
        summary = client.get_session(session.id)
    stuck = [c.chain for c in summary.chain_summaries if c.status == "needs_initial_point"]
    if stuck:
        raise ValueError(
            f"chains {stuck} of session {session.id} have no initial point inside the support "
            "(give them one: POST .../chains/{chain}/reset)"
        )
    print(
        f"session {session.id}: {summary.status}, {counts['evaluations']} model evaluations, "
        f"{counts['outside']} told as -inf"
    )
    return 0


def _session(client: Any, args: argparse.Namespace, inputs: int) -> Any:
    """The session to drive: a new one from the arguments, or ``--session``'s, whose
    dimension must be the model's number of inputs."""
    if args.session is None:
        session = client.create_session(
            args.dim or inputs,
            algorithm=args.algorithm,
            chains=args.chains,
            warmup=args.warmup,
            max_iterations=args.warmup + args.iterations,
            seed=args.seed,
            pseudo_marginal=args.pseudo_marginal,
        )
    else:
        session = client.get_session(args.session)
    if session.dim != inputs:
        raise ValueError(f"the session has dim {session.dim}, the model {inputs} inputs")
    return session


def _result(proposal_id: str, evaluated: Any) -> Any:
    """What to tell: ``(id, log density)``, or with a gradient the result's mapping."""
    if not isinstance(evaluated, tuple):
        return (proposal_id, evaluated)
    value, gradient = evaluated
    if value is None:
        return {"id": proposal_id, "log_density": None}  # outside: no gradient due
    return {"id": proposal_id, "log_density": value, "gradient": gradient}


def _worker(
    client: Any, session_id: str, evaluate: Callable[[Any], Any], lease_seconds: float
) -> None:
    """Ask, evaluate, step, until the session is done or a chain waits for a reset."""
    answer = client.ask(session_id, max=1, lease_seconds=lease_seconds)
    while not answer.done:
        if not answer.proposals and answer.status == "needs_initial_point":
            return  # a chain waits for a new initial point: nothing more to do
        if not answer.proposals:
            answer = client.ask(session_id, max=1, lease_seconds=lease_seconds, wait_seconds=5)
            continue
        # Every kind of proposal (init, proposal, leapfrog, gradient_check) alike.
        results = [_result(p.id, evaluate(p.x)) for p in answer.proposals]
        answer = _tell(client, session_id, results, lease_seconds)


def _tell(client: Any, session_id: str, results: list[Any], lease_seconds: float) -> Any:
    """Step with ``results``; on a 409 drop the ids it names (another worker answered
    them first: its values stand) and send the rest."""
    from kameleon.errors import Conflict

    while True:
        try:
            return client.step(session_id, results, max=1, lease_seconds=lease_seconds)
        except Conflict as exc:
            if not exc.ids:
                raise
            results = [r for r in results if _id(r) not in set(exc.ids)]


def _id(result: Any) -> str:
    return str(result[0] if isinstance(result, tuple) else result["id"])
