"""The service's commands: run the service, make an API key, write the OpenAPI document.

``kameleon serve [--host H] [--port P] [--workers N] [--store memory|redis] [--redis-url URL]
[--allow-unauthenticated] [--<any setting> VALUE ...]``
``kameleon hash-key`` (the key from stdin, or a new random one)
``kameleon openapi [--output openapi.yaml]``

Every flag of ``serve`` can also be set from the environment (``KAMELEON_HOST``,
``KAMELEON_PORT``, ``KAMELEON_WORKERS``, ``KAMELEON_STORE``, ``KAMELEON_REDIS_URL``,
``KAMELEON_ALLOW_UNAUTHENTICATED``, ...); a flag given wins over the environment.

``serve`` refuses to bind a non-loopback address when no API key is configured, unless
told that this is intended (``--allow-unauthenticated``); a setting it cannot use is one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kameleon.service.config import Settings

__all__ = ["is_loopback", "main", "service_url"]

#: The exit status of a configuration the service refuses to start with.
EXIT_CONFIG = 2

#: Commands this module runs (the client's commands are in :mod:`kameleon.cli`).
COMMANDS = ("serve", "hash-key", "openapi")


def _setting_flags() -> tuple[str, ...]:
    """Every setting is a flag of ``serve`` (``redis_url`` is ``--redis-url``)."""
    from kameleon.service.config import Settings

    return tuple(Settings.model_fields)


def _add_serve(sub: Any) -> None:
    from pydantic_core import PydanticUndefined

    from kameleon.service.config import Settings

    serve = sub.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Every setting is a flag and an environment "
        "variable (KAMELEON_<NAME>); a flag given wins over the environment.",
    )
    for name, info in Settings.model_fields.items():
        default = info.default if info.default is not PydanticUndefined else None
        if info.default_factory is not None:
            default = info.default_factory()  # type: ignore[call-arg]
        text = (info.description or name.replace("_", " ")).rstrip(".")
        help_ = f"{text} (default: {default!r}; env KAMELEON_{name.upper()})".replace("%", "%%")
        flag = "--" + name.replace("_", "-")
        if info.annotation is bool:
            serve.add_argument(flag, dest=name, action="store_const", const="true", help=help_)
        else:
            serve.add_argument(flag, dest=name, metavar=name.upper(), help=help_)


def add_commands(sub: Any) -> None:
    """Add ``serve``, ``hash-key`` and ``openapi`` to a parser's subcommands."""
    _add_serve(sub)
    sub.add_parser(
        "hash-key",
        help="print an API key and the hash the service is configured with",
        description="Read an API key from stdin (surrounding whitespace is dropped), or make "
        "a new random one when stdin is a terminal or empty, and print the key and its "
        "SHA-256 hash: the hash goes into KAMELEON_API_KEY_HASHES or the file that "
        "KAMELEON_API_KEY_HASHES_FILE names, the key to the clients (header X-API-Key).",
    )
    openapi = sub.add_parser("openapi", help="write the OpenAPI document as YAML")
    openapi.add_argument("--output", "-o", default="-", help="file to write (default stdout)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kameleon", description="Kameleon sampling service.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


#: One BLAS thread per service process: the samplers' matrices are small, requests are
#: served concurrently, and threads would only contend for the cores.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the service on this machine.

    Addresses in 127.0.0.0/8 and ``::1``, and the name ``localhost``; any other name is
    taken as reachable from elsewhere.
    """
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def service_url(host: str, port: int) -> str:
    """The URL a browser on this machine reaches a service bound to ``host`` at: an
    address that binds every interface is reached at localhost."""
    name = host.strip().strip("[]")
    if name in ("", "0.0.0.0", "::"):
        name = "localhost"
    if ":" in name:
        name = f"[{name}]"
    return f"http://{name}:{port}"


def _fail(message: str) -> int:
    print(f"kameleon: error: {message}", file=sys.stderr)
    return EXIT_CONFIG


def _settings_problem(exc: Exception) -> str:
    """One line for a setting that could not be read: which variable, and why.

    The values themselves are left out: they may hold secrets (a key where its hash
    belongs, a password in a Redis URL).
    """
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{_setting_name(field)}: {message}" if field else message)
        return "bad setting " + "; ".join(problems)
    # pydantic-settings could not decode a JSON value from the environment
    match = re.search(r'field "(\w+)"', str(exc))
    if match:
        name = _setting_name(match.group(1))
        return f'bad setting {name}: not valid JSON (a list is written ["a", "b"])'
    return f"bad setting: {exc}"


def _setting_name(field: str) -> str:
    """How a setting is given: its environment variable, and its flag if it has one."""
    env = f"KAMELEON_{field.upper()}"
    return f"{env} (--{field.replace('_', '-')})"


def _load_settings() -> Settings | str:
    """The settings from the environment, or one line saying what is wrong with them."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from kameleon.service.config import Settings

    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        return _settings_problem(exc)


def _check_exposure(settings: Settings) -> int | None:
    """Refuse (an exit status) or warn when the service would be open beyond loopback."""
    if settings.api_key_hashes or is_loopback(settings.host):
        return None
    where = f"{settings.host}:{settings.port}"
    if not settings.allow_unauthenticated:
        return _fail(
            f"refusing to serve on {where} with no API key configured: anyone who can "
            "reach it could use the service. Set KAMELEON_API_KEY_HASHES or "
            "KAMELEON_API_KEY_HASHES_FILE (`kameleon hash-key` makes a key), or, on a "
            "trusted network only, pass --allow-unauthenticated "
            "(KAMELEON_ALLOW_UNAUTHENTICATED=true)"
        )
    print(
        f"kameleon: warning: serving on {where} with no API key: anyone who can reach it "
        "can use the service (allowed by --allow-unauthenticated / "
        "KAMELEON_ALLOW_UNAUTHENTICATED)",
        file=sys.stderr,
    )
    return None


def _serve(args: argparse.Namespace) -> int:
    for var in BLAS_THREADS:
        os.environ.setdefault(var, "1")

    # Flags go into the environment, where every service process reads its settings.
    for name in _setting_flags():
        value = getattr(args, name, None)
        if value is not None:
            os.environ[f"KAMELEON_{name.upper()}"] = str(value)
    settings = _load_settings()
    if isinstance(settings, str):
        return _fail(settings)
    from kameleon.service.store.backends import STORES

    if settings.workers > 1 and not STORES[settings.store].shared:
        shared = " or ".join(b.name for b in STORES.values() if b.shared)
        print(
            f"kameleon: --workers > 1 needs a store the processes share (--store {shared}): "
            f"with {settings.store} each process would have its own sessions",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    refused = _check_exposure(settings)
    if refused is not None:
        return refused
    base = service_url(settings.host, settings.port)
    print(f"kameleon: dashboard at {base}/ui (API explorer at {base}/v1/docs)", flush=True)
    import uvicorn

    from kameleon.service.http_protocol import ReadTimeoutProtocol

    uvicorn.run(
        "kameleon.service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        access_log=False,
        http=ReadTimeoutProtocol,
        loop="uvloop",
        timeout_keep_alive=30,
    )
    return 0


def _hash_key() -> int:
    from kameleon.service.config import hash_api_key

    given = ""
    if sys.stdin is not None and not sys.stdin.isatty():
        given = sys.stdin.read().strip()
    if "\n" in given:
        return _fail("hash-key reads one key: stdin holds more than one line")
    key = given or secrets.token_urlsafe(32)
    print(f"key:  {key}")
    print(f"hash: {hash_api_key(key)}")
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from kameleon.service.openapi import render

    text = render()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one of :data:`COMMANDS`, parsed by a parser that :func:`add_commands` made."""
    if args.command == "serve":
        return _serve(args)
    if args.command == "hash-key":
        return _hash_key()
    return _openapi(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_parser().parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
