"""``metastore`` command line: ``serve`` runs a node (embedded by default)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from aiohttp import web

from metastore import __version__
from metastore.config import ServerConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metastore", description=__doc__)
    parser.add_argument("--version", action="version", version=f"metastore {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a metastore node (embedded: RocksDB, no broker)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1; env METASTORE_HOST)")
    serve.add_argument("--port", type=int, help="HTTP port (default 8181; env METASTORE_PORT)")
    serve.add_argument("--data-dir", help="RocksDB data directory (default ./data)")
    serve.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fsync every group commit (default on; env METASTORE_FSYNC)",
    )
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING (default INFO)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        try:
            config = ServerConfig.load(
                {
                    "host": args.host,
                    "port": args.port,
                    "data_dir": args.data_dir,
                    "fsync": args.fsync,
                    "log_level": args.log_level,
                }
            )
        except (ValueError, TypeError) as exc:
            print(f"metastore: invalid configuration: {exc}", file=sys.stderr)
            return 2
        return serve(config)
    return 2


def serve(config: ServerConfig) -> int:
    from metastore.api.app import create_app

    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    web.run_app(
        create_app(config),
        host=config.host,
        port=config.port,
        print=lambda _: logging.getLogger("metastore").info(
            "serving on http://%s:%d", config.host, config.port
        ),
        shutdown_timeout=10,
    )
    return 0
