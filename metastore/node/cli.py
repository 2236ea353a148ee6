"""``metastore`` command line: ``serve`` runs a node (embedded by default); ``topics``
manages the cluster mode's changelog topics; ``replay`` rebuilds a view; ``rebuild``,
``audit``, ``export`` and ``gc`` are the data pipeline's jobs on Spark (``metastore.pipeline``)."""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from metastore import __version__
from metastore.config.environment import env_flag
from metastore.config.server_config import ServerConfig
from metastore.util import logs
from metastore.util.setting_rules import check_range, decimal, integer

# What ``metastore --help`` says above the commands: plain text, as a terminal shows it
# (the module's docstring is written for readers of the source, in reST).
DESCRIPTION = (
    "An Iceberg REST catalog. serve runs a node (embedded by default, or one node of a"
    " cluster on Kafka); topics and replay look after a cluster's changelog; audit,"
    " export, rebuild, gc and maintain are the data pipeline's jobs on Spark."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metastore", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"metastore {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND"
    )
    serve = commands.add_parser("serve", help="run a metastore node (embedded: RocksDB, no broker)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1; env METASTORE_HOST)")
    serve.add_argument("--port", type=integer, help="HTTP port (default 8181; env METASTORE_PORT)")
    serve.add_argument("--data-dir", help="RocksDB data directory (default ./data)")
    serve.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fsync every group commit (default on; env METASTORE_FSYNC)",
    )
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING (default INFO)")
    cluster = serve.add_argument_group(
        "cluster mode", "set --kafka to run as one node of a cluster on Kafka changelog topics"
    )
    cluster.add_argument(
        "--kafka", metavar="HOST:PORT", help="bootstrap servers (env METASTORE_KAFKA)"
    )
    cluster.add_argument(
        "--advertised-url",
        metavar="URL",
        help="how peers reach this node (default http://HOST:PORT; env METASTORE_ADVERTISED_URL)",
    )
    cluster.add_argument("--topic-prefix", help="topics <prefix>.refs/.objects (default metastore)")
    cluster.add_argument(
        "--cluster-id", help="names the transactional ids and groups (default metastore)"
    )
    cluster.add_argument(
        "--partitions", type=integer, help="partitions of the topics (default 12; checked)"
    )
    cluster.add_argument(
        "--broker-profile",
        choices=("kafka", "tansu"),
        help="the broker the cluster runs on: kafka (Apache Kafka or as conformant, the"
        " default) or tansu (env METASTORE_BROKER_PROFILE)",
    )
    cluster.add_argument(
        "--restore-from",
        metavar="DIR",
        help="start an empty view from this checkpoint of a view (another node's, or the "
        "--out of metastore rebuild), then read only the tail (env METASTORE_RESTORE_FROM)",
    )
    _add_topics(commands)
    _add_replay(commands)
    from metastore.pipeline import parsers as pipeline

    pipeline.add_parsers(commands)
    return parser


def _add_topics(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = commands.add_parser("topics", help="create, describe or check the changelog topics")
    actions = topics.add_subparsers(dest="action", required=True)
    kafka, prefix = os.environ.get("METASTORE_KAFKA"), os.environ.get("METASTORE_TOPIC_PREFIX")
    for action, text in (
        ("create", "create the missing topics (existing ones are checked, never recreated)"),
        ("describe", "print partitions, replication and configs of the topics as JSON"),
        ("check", "exit 0 if the topics are safe, 1 listing every problem and its fix"),
    ):
        sub = actions.add_parser(action, help=text)
        sub.add_argument(
            "--kafka",
            default=kafka,
            required=not kafka,
            metavar="HOST:PORT",
            help="bootstrap servers (env METASTORE_KAFKA)",
        )
        sub.add_argument(
            "--prefix",
            default=prefix or "metastore",
            help="topics are <prefix>.refs and <prefix>.objects "
            "(default metastore; env METASTORE_TOPIC_PREFIX)",
        )
        sub.add_argument("--partitions", type=integer, default=12, help="default 12")
        sub.add_argument("--replication-factor", type=integer, default=1, help="default 1")
        sub.add_argument(
            "--events",
            action="store_true",
            default=None,  # then METASTORE_PUBLISH_EVENTS, read when the command runs
            help="also the change events topic <prefix>.events (env METASTORE_PUBLISH_EVENTS)",
        )
        sub.add_argument("--timeout", type=decimal, default=10.0, help="seconds per broker call")


def _add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from metastore.cluster import replay

    replay.add_parser(commands)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        flags: dict[str, object] = {  # None: not given (then the environment's, or the default)
            "host": args.host,
            "port": args.port,
            "data_dir": args.data_dir,
            "fsync": args.fsync,
            "log_level": args.log_level,
            "kafka": args.kafka,
            "advertised_url": args.advertised_url,
            "topic_prefix": args.topic_prefix,
            "cluster_id": args.cluster_id,
            "partitions": args.partitions,
            "restore_from": args.restore_from,
            "broker_profile": args.broker_profile,
        }
        try:
            config = ServerConfig.load(flags)
        except (ValueError, TypeError) as exc:
            _refuse(str(exc))
            return 2
        return serve(config, ServerConfig.names(flags, os.environ))
    if args.command == "topics":
        return topics(args)
    if args.command == "replay":
        from metastore.cluster import replay

        return replay.run(args)
    if args.command in ("audit", "export"):
        from metastore.pipeline import job_runner as pipeline_cli

        return pipeline_cli.run(args)
    if args.command == "gc":
        from metastore.pipeline.gc import gc_job

        return gc_job.main(args)
    if args.command == "maintain":
        from metastore.pipeline.maintain import maintain_command as maintain

        return maintain.run(args)
    if args.command == "rebuild":
        from metastore.pipeline.rebuild import rebuild_job as rebuild

        return rebuild.run(args)
    return 2


def serve(config: ServerConfig, names: Mapping[str, str]) -> int:
    """Run the node until SIGTERM/SIGINT; 2 (one line on stderr) if its data directory
    or its address cannot be used, or if another node refuses its credential. The
    line names each setting as the operator gave it (``names``: ``ServerConfig.names``).

    A start that fails leaves behind no data directory it made itself: an operator who
    mistyped a flag finds no empty ``data`` folder to wonder about. Only directories
    this start created go, and only while empty (``rmdir``): one that existed stays,
    and so does one that holds anything, whoever wrote it."""
    made = _missing_dirs(config.data_dir)
    status = 2  # also when a defect raises
    try:
        status = _serve(config, names)
    finally:
        if status == 2:
            _remove_empty(made)
    return status


def _serve(config: ServerConfig, names: Mapping[str, str]) -> int:
    from metastore.cluster.protocol import PeerRefused
    from metastore.node import server
    from metastore.node.app import create_app
    from metastore.node.refusals import address, refusal

    try:
        _check_data_dir(config.data_dir)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        _refuse(f"{names['data_dir']}: cannot use {str(config.data_dir)!r} ({reason})")
        return 2
    try:
        _check_address(config.host, config.port)
    except OSError as exc:
        _refuse(address(config, exc, names))
        return 2
    logs.configure(config.log_level, config.log_format)
    if config.restore_from:
        from metastore.cluster.restore import RestoreError, restore

        try:
            restored = restore(
                Path(config.restore_from), config.data_dir, config.topic_prefix, config.partitions
            )
        except RestoreError as exc:
            _refuse(f"{names['restore_from']}: {exc.message}")
            return 2
        logging.getLogger("metastore.cluster.restore").info(
            "view restored from %s (%d files): %d records below its offsets, not re-read",
            config.restore_from, restored.files, restored.records,
        )  # fmt: skip
    # `kill -USR1 <pid>` prints every thread's stack: the first tool for a stuck node
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    context = None
    if config.tls_cert:  # HTTPS; with a CA, peers' client certificates are checked
        from metastore.cluster import tls

        context = tls.server_context(config.tls_cert, config.tls_key, config.tls_ca)
    try:
        stopped = server.run(create_app(config), config, context)  # limits and deadlines
    except PeerRefused as exc:  # the cluster secrets (or CAs) differ: nothing to retry
        _refuse(exc.message)
        return 2
    except Exception as exc:
        line = refusal(exc, config, names)  # what an operator can fix, as one line
        if line is None:
            raise  # a defect: the traceback is the report
        print(f"metastore: cannot start: {line}", file=sys.stderr)
        return 2
    if stopped is not None:  # the node stopped itself: a supervisor should restart it
        print(f"metastore: stopped: {stopped}", file=sys.stderr)
        return 1
    return 0


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first: what
    making ``path`` would create."""
    missing = []
    for level in (path, *path.parents):
        try:
            if level.exists():
                break
        except OSError:  # cannot be looked at (a parent without search permission): not ours
            break
        missing.append(level)
    return missing


def _remove_empty(made: list[Path]) -> None:
    """Remove the directories of ``made`` (deepest first) as long as they are empty."""
    for level in made:
        try:
            level.rmdir()
        except FileNotFoundError:  # its making failed: its parents may still be empty
            continue
        except OSError:  # not empty: it stays, and so do its parents
            return


def _check_data_dir(path: Path) -> None:
    """The data directory exists (or can be made) and this process may write in it."""
    path.mkdir(parents=True, exist_ok=True)
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "not a writable directory")


def _check_address(host: str, port: int) -> None:
    """Bind (and release) every address ``host:port`` resolves to, as the server will:
    a host that is not this machine's or a port in use is refused before startup."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)


def _refuse(problem: str) -> None:
    print(f"metastore: invalid configuration: {problem}", file=sys.stderr)


def topics(args: argparse.Namespace) -> int:
    from metastore.cluster import topics as changelog
    from metastore.cluster.cluster_config import (
        ClusterConfig,
        profile_from_env,
        properties_from_env,
    )

    try:
        config = ClusterConfig(
            bootstrap=args.kafka,
            prefix=args.prefix,
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            kafka_properties=properties_from_env(os.environ),
            broker_profile=profile_from_env(os.environ),
            publish_events=args.events or env_flag(os.environ, "METASTORE_PUBLISH_EVENTS"),
        )
        check_range("--timeout", args.timeout, 0.1, 3600)  # what the admin client accepts
        changelog.specs_for(config)
    except ValueError as exc:
        print(f"metastore: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "describe":
            print(json.dumps(changelog.describe(config, timeout=args.timeout), indent=2))
            return 0
        if args.action == "create":
            report = changelog.create(config, timeout=args.timeout)
            for name in report.created:
                print(f"created {name} ({config.partitions} partitions)")
            for name in report.existing:
                print(f"found {name} (existing: checked, not recreated)")
        problems = changelog.check(config, timeout=args.timeout)
    except changelog.TopicsError as exc:
        print(f"metastore: {exc} ({config.connection()})", file=sys.stderr)
        return 2
    if problems:
        print(f"{len(problems)} problem(s) with the topics:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    names = [spec.name(config) for spec in changelog.specs_for(config)]
    print(f"ok: {', '.join(names[:-1])} and {names[-1]} are safe")
    return 0
