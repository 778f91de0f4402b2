"""Draws (JSON, CSV, NPY; paged and sliced) and convergence diagnostics."""

from __future__ import annotations

import io
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter, Header, Query, Request
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from kameleon.service.deps import OwnerDep, SessionsDep, SettingsDep
from kameleon.service.jsonio import JSON
from kameleon.service.problems import NotFound, Unprocessable
from kameleon.service.routes import problems
from kameleon.service.schemas import Diagnostics, DrawsPage, Trace, Weights
from kameleon.service.sessions.draws import ChainSlice, DrawsQuery, RowLayout
from kameleon.service.sessions.trace import TraceQuery

router = APIRouter(prefix="/sessions/{session_id}", tags=["draws"])

_FORMATS = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "npy": "application/octet-stream",
}


def _next_url(request: Request, next_start: int | None) -> str | None:
    """The next page as a reference relative to this request's URL (``draws?...``), so
    that it resolves behind a proxy that serves the API under a path prefix."""
    if next_start is None:
        return None
    params = dict(request.query_params)
    params["start"] = str(next_start)
    return f"draws?{urlencode(params)}"


#: The per-transition statistics' names in CSV, as Stan's CSV names them.
STAN_NAMES = {
    "step_size": "stepsize__",
    "tree_depth": "treedepth__",
    "n_steps": "n_leapfrog__",
    "diverging": "divergent__",
    "energy": "energy__",
}


def _json(
    names: list[str],
    slices: list[ChainSlice],
    thin: int,
    next_url: str | None,
    stats: tuple[str, ...],
) -> Response:
    dim = len(names)
    chains = []
    for s in slices:
        iterations = list(range(s.first_iteration, s.first_iteration + thin * len(s.rows), thin))
        chain: dict[str, Any] = {
            "chain": s.chain,
            "start": s.start,
            "iterations": iterations,
            "draws": np.ascontiguousarray(RowLayout.positions(s.rows, dim)),
            "log_density": np.ascontiguousarray(s.rows[:, RowLayout.LOG_DENSITY]),
            "accepted": (s.rows[:, RowLayout.ACCEPTED] != 0).tolist(),
        }
        if stats:
            columns = RowLayout.stats(s.rows, dim)
            chain["sample_stats"] = {
                name: np.ascontiguousarray(columns[:, k]) for k, name in enumerate(stats)
            }
        chains.append(chain)
    return JSON({"param_names": names, "chains": chains, "next": next_url})


def _csv(
    names: list[str], slices: list[ChainSlice], thin: int, warmup: int, stats: tuple[str, ...]
) -> str:
    out = io.StringIO()
    header = ["chain", "iteration", "warmup", "log_density", *_csv_names(names)]
    header += [STAN_NAMES.get(n, n + "__") for n in stats]
    out.write(",".join(header) + "\n")
    for s in slices:
        for k, row in enumerate(s.rows):
            iteration = s.first_iteration + k * thin
            values = ",".join(repr(float(v)) for v in row[RowLayout.POSITION :])
            log_density = float(row[RowLayout.LOG_DENSITY])
            out.write(
                f"{s.chain},{iteration},{int(iteration <= warmup)},{log_density!r},{values}\n"
            )
    return out.getvalue()


def _csv_names(names: list[str]) -> list[str]:
    """Header cells: a name a spreadsheet would read as a formula (leading ``=``, ``+``,
    ``-``, ``@``, tab or carriage return) gets a leading ``'``, then RFC 4180 quoting."""

    def quote(name: str) -> str:
        if name[:1] in ("=", "+", "-", "@", "\t", "\r"):
            name = "'" + name
        if any(c in name for c in ',"\n\r'):
            return '"' + name.replace('"', '""') + '"'
        return name

    return [quote(n) for n in names]


def _npy(slices: list[ChainSlice], dim: int) -> bytes:
    common = min((len(s.rows) for s in slices), default=0)
    array = (
        np.stack([RowLayout.positions(s.rows[:common], dim) for s in slices])
        if slices
        else np.empty((0, 0, dim))
    )
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array, dtype="<f8"), allow_pickle=False)
    return buffer.getvalue()


@router.get(
    "/draws",
    name="get_draws",
    response_model=DrawsPage,
    responses={
        **problems(404, 422),
        200: {
            "description": "A page of draws. `format=csv`: one row per draw with a header "
            "`chain,iteration,warmup,log_density,<names>`. `format=npy`: a float64 array of "
            "shape (chains, draws, dim), cut to the shortest selected chain. For CSV and NPY "
            "the next page, if any, is in the `Link` header (rel=next).",
            "content": {"text/csv": {}, "application/octet-stream": {}},
        },
    },
)
async def get_draws(
    session_id: str,
    request: Request,
    sessions: SessionsDep,
    owner: OwnerDep,
    settings: SettingsDep,
    chain: Annotated[int | None, Query(ge=0, description="One chain; default all.")] = None,
    start: Annotated[int, Query(ge=0, description="First draw, within the selection.")] = 0,
    stop: Annotated[
        int | None, Query(ge=0, description="End (exclusive); default: the end.")
    ] = None,
    thin: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    include_warmup: bool = False,
    format: Literal["json", "csv", "npy"] = "json",
    page_size: Annotated[
        int | None,
        Query(
            ge=1,
            description="Most draws in one page, over all the selected chains (split "
            "evenly between them, at least one each); default and maximum are settings "
            "(10 000 and 100 000 unless configured).",
        ),
    ] = None,
) -> Response:
    """The chains' draws (post-warm-up unless ``include_warmup``), paged: at most
    ``page_size`` draws a page over the selected chains, and ``next`` (JSON) or the
    ``Link`` header (CSV, NPY) names the rest as a reference relative to the request's
    URL. Without ``start`` and ``stop``, follow ``next`` until it is null to get every
    draw; the SDK and ``kameleon export`` do."""
    meta = await sessions.meta(session_id, owner)
    if chain is not None and chain >= meta.chains:
        raise NotFound(f"no chain {chain} in this session")
    if stop is not None and stop < start:
        raise Unprocessable("stop must not be less than start", field="stop")
    if page_size is not None and page_size > settings.max_draws_page_size:
        raise Unprocessable(
            f"page_size is over the limit of {settings.max_draws_page_size}", field="page_size"
        )
    size = page_size if page_size is not None else settings.draws_page_size
    page_rows = max(1, size // (1 if chain is not None else meta.chains))
    query = DrawsQuery(chain, start, stop, thin, include_warmup)
    slices, next_start = await sessions.draws(meta, query, page_rows)
    next_url = _next_url(request, next_start)
    names = list(meta.param_names)
    if format == "json":
        return _json(names, slices, thin, next_url, meta.stats)
    headers = {"Link": f'<{next_url}>; rel="next"'} if next_url else {}
    if format == "csv":
        text = await run_in_threadpool(_csv, names, slices, thin, meta.warmup, meta.stats)
        return Response(text, media_type=_FORMATS["csv"], headers=headers)
    return Response(_npy(slices, meta.dim), media_type=_FORMATS["npy"], headers=headers)


@router.get(
    "/diagnostics", name="get_diagnostics", response_model=Diagnostics, responses=problems(404)
)
async def get_diagnostics(session_id: str, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """Per parameter: mean, sd, MCSE of the mean, bulk and tail ESS and rank-normalised
    split R-hat (Vehtari et al. 2021) over the post-warm-up draws, the chains cut to a
    common length; per chain: iterations and post-warm-up acceptance rate; and the
    convergence warnings (see WarningOut for their codes). Undefined values (too few
    draws, constant chains) are null. Computed when the draws have changed since the
    last time, else answered from the store; the session summary shows the latest
    warnings."""
    return JSON(await sessions.diagnostics_of(session_id, owner))


@router.get("/weights", name="get_weights", response_model=Weights, responses=problems(404))
async def get_weights(session_id: str, sessions: SessionsDep, owner: OwnerDep) -> JSON:
    """The log weight of every post-warm-up draw (the chains cut to a common length, as
    the diagnostics cut them): for `importance`, each draw weighed against the mixture
    of every chain's proposal, the weights of the evidence and of the weighted means;
    for a Markov chain, 0. Resampling the draws with these weights (the SDK's
    `Result.resample`) gives equally weighted draws."""
    return JSON(await sessions.weights_of(session_id, owner))


@router.get(
    "/trace",
    name="get_trace",
    response_model=Trace,
    responses={
        **problems(404, 422),
        304: {"description": "Not modified: the draws are those of the ETag in If-None-Match."},
    },
)
async def get_trace(
    session_id: str,
    sessions: SessionsDep,
    owner: OwnerDep,
    settings: SettingsDep,
    points: Annotated[int, Query(ge=2, le=10_000, description="Most draws kept per chain.")] = 500,
    include_warmup: bool = False,
    param: Annotated[
        list[Annotated[int, Field(ge=0)]] | None,
        Query(description="Parameters to keep, by index (repeat); default all."),
    ] = None,
    checkpoints: Annotated[
        int, Query(ge=1, le=200, description="Most checkpoints of the running R-hat and ESS.")
    ] = 20,
    if_none_match: Annotated[str | None, Header(max_length=4096)] = None,
) -> Response:
    """Every chain's draws (post-warm-up unless ``include_warmup``) thinned by one
    power-of-two ``stride`` to at most ``points`` per chain, the picked parameters and
    the log density, and split R-hat and bulk ESS of the kept post-warm-up draws at up
    to ``checkpoints`` lengths: what a plot of a long run needs, without paging through
    its draws. The ETag changes whenever the draws do; send it back in
    ``If-None-Match`` to get 304 while nothing changed."""
    meta = await sessions.meta(session_id, owner)
    if points * meta.chains > settings.max_draws_page_size:
        raise Unprocessable(
            f"points x chains is over the limit of {settings.max_draws_page_size}",
            field="points",
        )
    query = TraceQuery(points, include_warmup, tuple(param or ()), checkpoints)
    tag, doc = await sessions.trace(session_id, owner, query, if_none_match)
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if doc is None:
        return Response(status_code=304, headers=headers)
    return JSON(doc, headers=headers)
