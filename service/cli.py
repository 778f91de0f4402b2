"""``kameleon``: run the service, or write its OpenAPI document.

``kameleon serve [--host H] [--port P] [--workers N] [--store memory|redis] [--redis-url URL]``
``kameleon openapi [--output openapi.yaml]``

Every flag of ``serve`` can also be set from the environment (``KAMELEON_HOST``,
``KAMELEON_PORT``, ``KAMELEON_WORKERS``, ``KAMELEON_STORE``, ``KAMELEON_REDIS_URL``, ...);
a flag wins over the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kameleon", description="Kameleon sampling service.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--workers", type=int, help="service processes (default 1)")
    serve.add_argument(
        "--store", choices=["memory", "redis"], help="session store (default memory)"
    )
    serve.add_argument("--redis-url", help="Redis URL for --store redis")
    openapi = sub.add_parser("openapi", help="write the OpenAPI document as YAML")
    openapi.add_argument("--output", "-o", default="-", help="file to write (default stdout)")
    return parser


#: One BLAS thread per service process: the samplers' matrices are small, requests are
#: served concurrently, and threads would only contend for the cores.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _serve(args: argparse.Namespace) -> int:
    for var in BLAS_THREADS:
        os.environ.setdefault(var, "1")
    import uvicorn

    from service.config import Settings

    flags = {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "store": args.store,
        "redis_url": args.redis_url,
    }
    for name, value in flags.items():
        if value is not None:
            os.environ[f"KAMELEON_{name.upper()}"] = str(value)
    settings = Settings()
    if settings.workers > 1 and settings.store == "memory":
        print(
            "kameleon: --workers > 1 needs --store redis (each process would have its own memory)",
            file=sys.stderr,
        )
        return 2
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        access_log=False,
        http="httptools",
        loop="uvloop",
        timeout_keep_alive=30,
    )
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from service.openapi import render

    text = render()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _openapi(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
