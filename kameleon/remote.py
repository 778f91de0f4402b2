""":func:`kameleon.sample` through a service: a session, and ``workers`` workers that
ask for proposals with a lease, evaluate them and step, until the session is done."""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from kameleon._protocol import UNSET
from kameleon._run import (
    _REFRESH,
    _RHAT_EVERY,
    LogDensity,
    _Progress,
    _Run,
    single_threaded_worker,
)
from kameleon.client import Client
from kameleon.core import SAMPLERS
from kameleon.core.diagnostics.findings import Finding, StopRule
from kameleon.core.numerics.rng import Stream, fresh_generator, substream
from kameleon.core.running.chains import ConditionalFn
from kameleon.core.running.inprocess import Interrupted
from kameleon.errors import Conflict
from kameleon.models import Finding as ServiceFinding
from kameleon.models import Proposal, Session
from kameleon.result import Result

__all__ = [
    "core_finding",
    "resume_hint",
    "served",
    "served_session",
    "session_page",
    "session_result",
]


class _Stop(Exception):
    """Raised inside a worker when the run is over or failed elsewhere."""


def served(
    run: _Run,
    url: str,
    *,
    workers: int,
    api_key: str | None,
    lease_seconds: float,
    parallel: str,
    pseudo_marginal: bool,
    retry_seconds: float,
) -> Result:
    def connect() -> Client:
        return Client(url, api_key=api_key, retry_seconds=retry_seconds)

    if run.warmup + run.iterations < 1:
        raise ValueError("warmup + iterations must be positive")
    with connect() as client:
        session_id = _create(client, run, pseudo_marginal)
        try:
            if run.progress:
                print(f"kameleon: watch it at {session_page(client, session_id)}", file=sys.stderr)
            total = run.chains * (run.warmup + run.iterations)
            return _drive(
                client,
                connect,
                session_id,
                run.logdensity,
                run.chains,
                total,
                run.progress,
                workers=workers,
                parallel=parallel,
                lease_seconds=lease_seconds,
                names=run.names,
                conditionals=Conditionals(run.seed, run.conditionals),
            )
        except KeyboardInterrupt:  # before the workers started: the session is there
            result = session_result(client, session_id, chains=run.chains, names=run.names)
            warnings.warn(Interrupted(resume_hint(session_id, client.url)), stacklevel=3)
            return result


def served_session(
    session_id: str,
    logdensity: LogDensity,
    url: str,
    *,
    workers: int,
    api_key: str | None,
    lease_seconds: float,
    parallel: str,
    retry_seconds: float,
    progress: bool,
    extend: tuple[int, StopRule | None] | None = None,
    conditionals: Mapping[int, ConditionalFn] | None = None,
) -> Result:
    """Join an existing session: ``workers`` more workers on it, until it is done; with
    ``extend`` (draws per chain after warm-up, and a stopping rule or ``None`` to keep
    the session's), first make it end there."""

    def connect() -> Client:
        return Client(url, api_key=api_key, retry_seconds=retry_seconds)

    with connect() as client:
        session = client.get_session(session_id)
        if extend is not None:
            session = _extend(client, session, *extend)
        end = session.max_iterations
        total = session.chains * end if end is not None else 0
        return _drive(
            client,
            connect,
            session_id,
            logdensity,
            session.chains,
            total,
            progress,
            workers=workers,
            parallel=parallel,
            lease_seconds=lease_seconds,
            names=None,
            conditionals=Conditionals(session.seed, dict(conditionals or {})),
        )


def _extend(client: Client, session: Session, iterations: int, rule: StopRule | None) -> Session:
    """``session`` made to end at ``iterations`` draws per chain after its warm-up, and to
    stop by ``rule`` if given."""
    end = session.warmup + iterations
    if session.max_iterations is not None and end < session.max_iterations:
        have = session.max_iterations - session.warmup
        raise ValueError(
            f"extend=True: session {session.id} runs to {have} draws per chain after "
            f"warm-up already; give iterations= above that"
        )
    stop = (
        UNSET
        if rule is None
        else {"rhat": rule.rhat, "ess": rule.ess, "check_every": rule.check_every}
    )
    return client.update_session(session.id, max_iterations=end, stop=stop)


def _drive(
    client: Client,
    connect: Callable[[], Client],
    session_id: str,
    logdensity: LogDensity,
    chains: int,
    total: int,
    progress: bool,
    *,
    workers: int,
    parallel: str,
    lease_seconds: float,
    names: list[str] | None,
    conditionals: Conditionals | None = None,
) -> Result:
    """Run the workers on the session until it is done; its result. Interrupted
    (Ctrl-C), the result so far, with a warning that says how to go on."""
    drawing = conditionals if conditionals is not None else Conditionals(0, {})
    session = client.get_session(session_id)
    if _told_in_parts(session):
        logdensity = _InParts(logdensity)
    state = _Shared(bar=_Progress(total, progress and total > 0))
    pool: Executor | None = (
        ProcessPoolExecutor(max_workers=workers, initializer=single_threaded_worker)
        if parallel == "processes"
        else None
    )
    batch = max(1, math.ceil(chains / workers))
    askers = workers
    if workers > 1 and _has_rounds(session):
        # A population's round goes to one request: one thread asks for a point per
        # worker and evaluates them side by side (PROTOCOL.md, "Rounds").
        askers, batch = 1, workers
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kameleon-eval")
    threads = [
        threading.Thread(
            target=_worker,
            args=(connect, session_id, logdensity, pool, batch, lease_seconds, state, drawing),
            name=f"kameleon-worker-{w}",
            daemon=True,
        )
        for w in range(askers)
    ]
    interrupted = False
    # Workers evaluating at once in threads share the process's BLAS threads: one each.
    blas = threadpool_limits(limits=1, user_api="blas") if workers > 1 and pool is None else None
    try:
        _watch(client, session_id, threads, state)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        state.bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if blas is not None:
            blas.restore_original_limits()
    if state.error is not None and not interrupted:
        raise state.error
    if state.needs_initial:
        summary = client.get_session(session_id)
        stuck = [c.chain for c in summary.chain_summaries if c.status == "needs_initial_point"]
        raise ValueError(
            f"the log density of the initial point is -inf (chains {stuck}; "
            f"session {session_id} waits for a reset)"
        )
    result = session_result(client, session_id, chains=chains, names=names)
    if interrupted:
        warnings.warn(Interrupted(resume_hint(session_id, client.url)), stacklevel=4)
    return result


def resume_hint(session_id: str, url: str) -> str:
    """What an interrupted run through a service says: its session, and how to go on."""
    return (
        f"interrupted: session {session_id} on {url} keeps its draws and goes on when "
        f"workers join it: kameleon.sample(logdensity, url={url!r}, session={session_id!r}) "
        f"or kameleon run MODULE:FUNCTION --url {url} --session {session_id}; "
        f"kameleon.Result.from_session({url!r}, {session_id!r}) reads it"
    )


def session_page(client: Client, session_id: str) -> str:
    """The session's page in the service's dashboard."""
    return f"{client.url.removesuffix('/v1')}/ui/sessions/{session_id}"


def _create(client: Client, run: _Run, pseudo_marginal: bool) -> str:
    """The run's session; its id."""
    rule = run.rule
    session = client.create_session(
        run.dim,
        algorithm=run.algorithm,
        chains=run.chains,
        initial=run.initial,
        initial_radius=run.initial_radius,
        max_initial_attempts=run.max_initial_attempts,
        seed=run.seed,
        pseudo_marginal=pseudo_marginal or None,
        warmup=run.warmup,
        max_iterations=run.warmup + run.iterations,
        param_names=run.names,
        options=run.options,
        stop=None
        if rule is None
        else {"rhat": rule.rhat, "ess": rule.ess, "check_every": rule.check_every},
    )
    return session.id


def _watch(
    client: Client, session_id: str, threads: list[threading.Thread], state: _Shared
) -> None:
    """Start the workers and wait for them, drawing the progress bar (with R-hat asked
    of the service now and then); on an interruption, stop them first."""
    bar = state.bar
    try:
        for t in threads:
            t.start()
        last_rhat = time.monotonic()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=_REFRESH / len(threads))
            bar.draw()
            if bar.enabled and time.monotonic() - last_rhat > _RHAT_EVERY:
                last_rhat = time.monotonic()
                bar.r_hat = _rhat(client, session_id)
    except BaseException:
        state.stop.set()
        for t in threads:
            t.join()
        raise


def session_result(
    client: Client,
    session_id: str,
    *,
    chains: int | None = None,
    names: list[str] | None = None,
    include_warmup: bool = False,
) -> Result:
    """A :class:`~kameleon.result.Result` of a session as it stands: every page of its
    draws (post-warm-up unless ``include_warmup``), its diagnostics and warnings."""
    session = client.get_session(session_id)
    draws = client.draws(session_id, include_warmup=include_warmup)
    diagnostics = client.diagnostics(session_id)
    n = session.chains if chains is None else chains
    acceptance = np.full(n, np.nan)
    for ch in diagnostics.chains:
        if ch.acceptance_rate is not None and ch.chain < n:
            acceptance[ch.chain] = ch.acceptance_rate
    log_density = draws.log_density
    assert log_density is not None  # JSON pages carry them
    log_weights = None
    sampler = SAMPLERS.get(session.algorithm)
    if sampler is not None and sampler.weighted and not include_warmup:
        log_weights = client.weights(session_id)
        if log_weights.shape != log_density.shape:  # draws told meanwhile
            log_weights = None
    return Result(
        draws=draws.draws,
        log_density=log_density,
        acceptance=acceptance,
        param_names=draws.param_names or names or list(session.param_names),
        diagnostics=diagnostics,
        warnings=[core_finding(w) for w in diagnostics.warnings],
        seed=session.seed,
        algorithm=session.algorithm,
        warmup=session.warmup,
        session=session_id,
        url=client.url,
        accepted=draws.accepted,
        sample_stats=draws.sample_stats,
        log_weights=log_weights,
    )


@dataclass
class _Shared:
    bar: _Progress
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    needs_initial: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
        self.stop.set()


def _worker(
    connect: Callable[[], Client],
    session_id: str,
    logdensity: LogDensity,
    pool: Executor | None,
    batch: int,
    lease_seconds: float,
    state: _Shared,
    conditionals: Conditionals,
) -> None:
    """Ask, evaluate, step, until the session is done or the run stops; stopped, hand
    back the proposals it holds."""
    try:
        with connect() as client:
            answer = client.ask(session_id, max=batch, lease_seconds=lease_seconds)
            try:
                while not state.stop.is_set():
                    if answer.status == "needs_initial_point":
                        state.needs_initial = True
                        state.stop.set()
                        return
                    if not answer.proposals:
                        if answer.done:
                            return
                        # Every free chain is leased to another worker: the server holds
                        # the ask until a proposal frees up (a long poll, a second at a
                        # time so that a stop is seen).
                        answer = client.ask(
                            session_id, max=batch, lease_seconds=lease_seconds, wait_seconds=1.0
                        )
                        continue
                    results = _evaluate(answer.proposals, logdensity, pool, state, conditionals)
                    answer = _step(client, session_id, results, batch, lease_seconds, state)
            except _Stop:
                pass
            _hand_back(client, session_id, answer.proposals)
    except BaseException as exc:
        state.fail(exc)


def _hand_back(client: Client, session_id: str, proposals: list[Proposal]) -> None:
    """A stopped worker's leased proposals, handed back so that a worker joining the
    session gets them at once, not when their leases run out (best effort: one try, so
    that an interruption never waits on a service that does not answer)."""
    if not proposals:
        return
    client.retry_seconds = 0.0
    with contextlib.suppress(Exception):
        client.release_leases(session_id, [p.id for p in proposals])


@dataclass(frozen=True)
class Conditionals:
    """The draw functions of a ``gibbs`` session's conditional blocks, by block, and the
    session's seed, which seeds each draw's generator as the in-process runner does
    (:func:`kameleon.core.running.chains.ConditionalFn`): a run through a service draws what
    the same run in process draws."""

    seed: int
    draws: Mapping[int, ConditionalFn]

    def draw(self, p: Proposal) -> tuple[list[float], npt.NDArray[np.float64]]:
        """The block's draw at ``p``, and the point it makes."""
        if p.block is None or p.indices is None or p.block not in self.draws:
            raise ValueError(
                f"proposal {p.id} asks for a draw of block {p.block} from its full "
                f"conditional: give conditionals={{{p.block}: draw}} to kameleon.sample"
            )
        x = np.array(p.x, dtype=np.float64)
        x.flags.writeable = False
        rng = fresh_generator(self.seed, p.chain, p.iteration, substream(Stream.MIX, p.step))
        draw = np.asarray(self.draws[p.block](x, rng), dtype=np.float64).reshape(-1)
        point = np.array(x)
        if draw.size == len(p.indices):
            point[p.indices] = draw
        point.flags.writeable = False
        return draw.tolist(), point


def _has_rounds(session: Session) -> bool:
    """Whether ``session``'s chains hand out rounds of evaluations (``ensemble``,
    ``smc``, ``tempering``, ``importance``)."""
    sampler = SAMPLERS.get(session.algorithm)
    return sampler is not None and sampler.round_size is not None


def _told_in_parts(session: Session) -> bool:
    """Whether ``session``'s results tell the log prior and the log likelihood apart
    (``tempering`` of the likelihood): the log density function then returns the pair."""
    sampler = SAMPLERS.get(session.algorithm)
    if sampler is None or sampler.needs_parts is None:
        return False
    params = sampler.make_params(session.dim, session.options, warmup=session.warmup)
    return bool(sampler.needs_parts(params))


@dataclass(frozen=True)
class _Parts:
    log_prior: float
    log_likelihood: float


@dataclass(frozen=True)
class _InParts:
    """A log density function that returns ``(log prior, log likelihood)``, whose pair
    is told as the two parts (a module-level class, so that a process pool takes it)."""

    logdensity: LogDensity

    def __call__(self, x: npt.NDArray[np.float64]) -> _Parts:
        told = self.logdensity(x)
        if not (isinstance(told, tuple | list) and len(told) == 2):
            raise ValueError(
                "this session tells the log prior and the log likelihood apart: the "
                f"function must return the pair (log prior, log likelihood), not {told!r}"
            )
        prior, likelihood = (-math.inf if v is None else float(v) for v in told)
        if math.isnan(prior + likelihood) or prior == math.inf or likelihood == math.inf:
            raise ValueError(
                f"the log prior and log likelihood at {x.tolist()} are {prior} and "
                f"{likelihood}; each must be a number < +inf, or -inf"
            )
        return _Parts(prior, likelihood)


def _evaluate(
    proposals: list[Proposal],
    logdensity: LogDensity,
    pool: Executor | None,
    state: _Shared,
    conditionals: Conditionals | None = None,
) -> list[Any]:
    """Each proposal's result: ``(id, log density)``, or the result with its gradient
    when the log density returns the pair ``(log density, gradient)``; at a conditional
    proposal (``gibbs``), with the block's draw from ``conditionals``. With a ``pool``,
    the points are evaluated side by side in it."""
    results: list[Any] = []
    points: list[tuple[Proposal, list[float] | None, npt.NDArray[np.float64]]] = []
    for p in proposals:
        drawn: list[float] | None = None
        if p.kind == "conditional":
            drawn, x = (conditionals or Conditionals(0, {})).draw(p)
        else:
            x = np.array(p.x, dtype=np.float64)
            x.flags.writeable = False
        points.append((p, drawn, x))
    futures = [pool.submit(logdensity, x) for _, _, x in points] if pool is not None else []
    for k, (p, drawn, x) in enumerate(points):
        if state.stop.is_set():
            for future in futures:
                future.cancel()
            raise _Stop
        told = futures[k].result() if futures else logdensity(x)
        if isinstance(told, _Parts):
            results.append(
                {
                    "id": p.id,
                    "log_prior": _json_value(told.log_prior),
                    "log_likelihood": _json_value(told.log_likelihood),
                }
            )
            continue
        gradient = None
        if isinstance(told, tuple) and len(told) == 2:
            told, gradient = told
        value = -math.inf if told is None else float(told)
        if math.isnan(value) or value == math.inf:
            raise ValueError(f"the log density at {x.tolist()} is {value}; it must be < +inf")
        if drawn is not None:
            results.append({"id": p.id, "draw": drawn, "log_density": _json_value(value)})
        elif gradient is None:
            results.append((p.id, value))
        else:
            g = np.asarray(gradient, dtype=np.float64).reshape(-1).tolist()
            results.append({"id": p.id, "log_density": value, "gradient": g})
    return results


def _json_value(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _result_id(result: Any) -> str:
    return str(result["id"] if isinstance(result, dict) else result[0])


def _step(
    client: Client,
    session_id: str,
    results: list[Any],
    batch: int,
    lease_seconds: float,
    state: _Shared,
) -> Any:
    """Tell ``results`` and ask for more; on a 409 drop the ids it names and resend."""
    pending = results
    while True:
        try:
            answer = client.step(session_id, pending, max=batch, lease_seconds=lease_seconds)
        except Conflict as exc:
            if not exc.ids:
                raise
            # Another worker answered these first (our lease ran out): its value stands.
            pending = [r for r in pending if _result_id(r) not in set(exc.ids)]
            continue
        counts = [r.outcome for r in answer.results]
        moved = counts.count("accepted") + counts.count("rejected")
        state.bar.count(len(results), moved, counts.count("accepted"))
        return answer


def _rhat(client: Client, session_id: str) -> float | None:
    try:
        return client.diagnostics(session_id).max_r_hat
    except Exception:  # the bar is a nicety: never fail a run for it
        return None


def core_finding(w: ServiceFinding) -> Finding:
    return Finding(w.code, w.parameter, w.chain, w.value, w.threshold, w.message)
