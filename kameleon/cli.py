"""``kameleon``: the command line, for the service and for its users.

::

    kameleon --version
    kameleon serve [--<setting> VALUE ...]            # every setting is a flag (--help)
    kameleon hash-key | openapi [-o FILE]
    kameleon sessions list | show ID | delete ID      [--url URL] [--api-key KEY] [--json]
    kameleon export ID --format csv|npy|getdist|netcdf --out PATH [--include-warmup]
    kameleon run MODULE:FUNCTION --dim D [--url URL] [--workers N] [--chains C] ...
    kameleon run MODULE:FUNCTION --session ID --url URL [--workers N]
    kameleon drive-umbridge --url URL --session ID --model-url URL [--model NAME] ...

The client commands take the service's address from ``--url`` or ``KAMELEON_URL``
(default ``http://127.0.0.1:8000``) and the key from ``--api-key`` or
``KAMELEON_API_KEY``. A failure is one line on stderr and a non-zero exit status (2 for
a bad argument or setting, 1 for a refused request or an unreachable service).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kameleon._protocol import DEFAULT_URL
from kameleon.core.interface.defaults import CHAINS, ITERATIONS, WARMUP
from kameleon.remote import session_result

__all__ = ["main"]

EXIT_FAILED, EXIT_USAGE = 1, 2
#: Stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=None, help="the service (default: $KAMELEON_URL or http://127.0.0.1:8000)"
    )
    parser.add_argument("--api-key", default=None, help="API key (default: $KAMELEON_API_KEY)")


def _parser() -> argparse.ArgumentParser:
    from kameleon import __version__
    from kameleon.service.cli import add_commands

    parser = argparse.ArgumentParser(prog="kameleon", description="Kameleon sampling service.")
    parser.add_argument("--version", action="version", version=f"kameleon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub)

    sessions = sub.add_parser("sessions", help="list, show or delete sessions")
    verbs = sessions.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the caller's sessions")
    show = verbs.add_parser("show", help="one session's summary, diagnostics and warnings")
    show.add_argument("session")
    delete = verbs.add_parser("delete", help="delete a session and its draws")
    delete.add_argument("session")
    for p in (listing, show, delete):
        _client_options(p)
        p.add_argument("--json", action="store_true", help="print JSON")

    export = sub.add_parser("export", help="write a session's draws to a file (every page)")
    export.add_argument("session")
    export.add_argument("--format", required=True, choices=["csv", "npy", "getdist", "netcdf"])
    export.add_argument("--out", required=True, help="file (getdist: the root of the files)")
    export.add_argument("--include-warmup", action="store_true")
    _client_options(export)

    run = sub.add_parser("run", help="sample a Python log density (in process, or on --url)")
    run.add_argument("target", help="MODULE:FUNCTION, a log density of one numpy array")
    run.add_argument("--dim", type=int, default=None, help="dimension (not with --session)")
    run.add_argument("--algorithm", default="am")
    run.add_argument("--chains", type=int, default=CHAINS, help=f"chains (default {CHAINS})")
    run.add_argument(
        "--iterations",
        type=int,
        default=ITERATIONS,
        help=f"draws kept per chain after warm-up (default {ITERATIONS})",
    )
    run.add_argument(
        "--warmup",
        type=int,
        default=WARMUP,
        help=f"warm-up iterations per chain (default {WARMUP})",
    )
    run.add_argument(
        "--extend",
        action="store_true",
        help="with --session: first make the session end at --iterations draws per chain "
        "after its warm-up (a later end); a session that was done goes on",
    )
    run.add_argument("--workers", type=int, default=1, help="parallel evaluations (with --url)")
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--pseudo-marginal", action="store_true")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument("--out", help="write the draws as CSV here")
    run.add_argument(
        "--session",
        default=None,
        help="join this session on --url (more workers, or go on after an interruption)",
    )
    _client_options(run)

    from kameleon.umbridge import add_command

    add_command(sub, _client_options)
    return parser


def _client(args: argparse.Namespace) -> Any:
    from kameleon.client import Client

    # An interactive command gives up at once: one line naming the URL, not a minute of
    # retries (the sampling loop of `run` keeps retrying).
    return Client(args.url, api_key=args.api_key, retry_seconds=0.0)


def _url(args: argparse.Namespace) -> str:
    return str(getattr(args, "url", None) or os.environ.get("KAMELEON_URL") or DEFAULT_URL)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _sessions(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.verb == "list":
            sessions = list(client.iter_sessions())
            if args.json:
                _print_json([dataclasses.asdict(s) for s in sessions])
                return 0
            print(f"{'id':<26}{'algorithm':<12}{'dim':>5}{'chains':>7}{'iterations':>12}  status")
            for s in sessions:
                print(
                    f"{s.id:<26}{s.algorithm:<12}{s.dim:>5}{s.chains:>7}{s.iterations:>12}  "
                    f"{s.status}"
                )
            return 0
        if args.verb == "delete":
            client.delete_session(args.session)
            print(f"deleted {args.session}")
            return 0
        session = client.get_session(args.session)
        diagnostics = client.diagnostics(args.session)
        if args.json:
            _print_json(
                {
                    "session": dataclasses.asdict(session),
                    "diagnostics": dataclasses.asdict(diagnostics),
                }
            )
            return 0
        print(
            f"session {session.id}: {session.algorithm}, dim {session.dim}, {session.chains} "
            f"chains, {session.iterations} iterations, status {session.status}"
            + (f" (stopped by {session.stopped_by})" if session.stopped_by else "")
        )
        print(session_result(client, args.session).summary())
        return 0


def _export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = session_result(client, args.session, include_warmup=args.include_warmup)
    out = Path(args.out)
    if args.format == "csv":
        written = [result.to_csv(out)]
    elif args.format == "npy":
        np.save(out, result.draws, allow_pickle=False)
        written = [out if out.suffix == ".npy" else out.with_name(out.name + ".npy")]
    elif args.format == "getdist":
        written = result.save_getdist(out)
    else:
        result.to_arviz().to_netcdf(str(out))
        written = [out]
    shape = "x".join(str(n) for n in result.draws.shape)
    print(f"wrote {shape} draws (chains x draws x dim) to {', '.join(map(str, written))}")
    return 0


def _load_target(spec: str) -> Callable[[Any], float]:
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION")
    sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {spec}: {exc}") from None
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _run(args: argparse.Namespace) -> int:
    import warnings

    import kameleon
    from kameleon.core.diagnostics.findings import SamplingWarning
    from kameleon.core.running.inprocess import Interrupted

    if args.session and not args.url and not os.environ.get("KAMELEON_URL"):
        raise ValueError("--session joins a session on a service: give --url too")
    url = args.url or (os.environ.get("KAMELEON_URL") if args.session else None)
    if args.session is None and args.dim is None:
        raise ValueError("give --dim (or --session to join a session)")
    with warnings.catch_warnings(record=True) as caught:
        # The summary below prints the convergence warnings, grouped: once, not also
        # as Python warnings.
        warnings.simplefilter("ignore", SamplingWarning)
        warnings.simplefilter("always", Interrupted)
        result = kameleon.sample(
            _load_target(args.target),
            dim=args.dim,
            algorithm=args.algorithm,
            chains=args.chains,
            iterations=args.iterations,
            warmup=args.warmup,
            url=url,
            workers=args.workers,
            seed=args.seed,
            progress=not args.no_progress,
            pseudo_marginal=args.pseudo_marginal,
            api_key=args.api_key,
            session=args.session,
            extend=args.extend,
        )
    where = f"session {result.session} on {result.url}" if result.session else "in process"
    print(f"{result.algorithm}, {result.chains} chains x {result.draws.shape[1]} draws, {where}")
    print(result.summary())
    if args.out:
        print(f"wrote {result.to_csv(args.out)}")
    interrupted = [w for w in caught if issubclass(w.category, Interrupted)]
    for w in interrupted:
        print(f"kameleon: {w.message}", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else 0


def main(argv: Sequence[str] | None = None) -> int:
    from kameleon.service import cli as service_cli

    args = _parser().parse_args(argv)
    if args.command in service_cli.COMMANDS:
        return service_cli.run(args)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "sessions": _sessions,
        "export": _export,
        "run": _run,
    }
    from kameleon.umbridge import drive

    commands["drive-umbridge"] = drive
    try:
        return commands[args.command](args)
    except KeyboardInterrupt:
        # Before a session existed (a run that had one says how to go on, above).
        print("kameleon: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ValueError as exc:  # a bad argument the parser could not see
        print(f"kameleon: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:  # an optional extra that is not installed
        print(f"kameleon: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a refused request, an unreachable service
        import httpx

        from kameleon.errors import KameleonError

        if isinstance(exc, httpx.TransportError):
            print(
                f"kameleon: error: cannot reach the service at {_url(args)} ({exc}); is it "
                "running? (--url or KAMELEON_URL name another)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if isinstance(exc, KameleonError | httpx.HTTPError | OSError):
            print(f"kameleon: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        raise


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
