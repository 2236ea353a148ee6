"""docker-compose.yml, the Dockerfile and the cluster Make targets, checked against the real CLI.

No Docker engine runs here, so the compose file is checked statically: every metastore
service's command is parsed by ``metastore.node.cli._parser()`` with the service's own
environment, the nodes' settings are resolved by ``ServerConfig.load`` exactly as
``metastore serve`` does, and the wiring (topics, advertised URLs, ports, volumes,
health checks, start order) is compared across services.

Each ``check_*`` function returns a list of problems. The file on disk must give none;
``test_checker_rejects`` breaks a copy of it in one way per case and expects that
same checker to name the problem, so no check passes vacuously.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import yaml

from harness.kafka import settings_for_tests
from metastore.cluster.cluster_config import (
    PROPERTIES_ENV,
    PROPERTIES_FILE_ENV,
    properties_from_env,
)
from metastore.cluster.peer_auth import MIN_SECRET_LENGTH
from metastore.config.environment import ENV_PREFIX
from metastore.config.server_config import ServerConfig
from metastore.errors import StorageUnavailable
from metastore.node.cli import _parser
from metastore.storage.credentials import CredentialSources, is_secret_key
from metastore.util.metrics import NodeMetrics

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
MAKEFILE = REPO / "Makefile"
PYPROJECT = REPO / "pyproject.toml"

Compose = dict[str, Any]
Problems = list[str]

NODE_NAME = re.compile(r"metastore-\d+")
HEALTH_URL = re.compile(r"http://(?:127\.0\.0\.1|localhost):(\d+)/health\b")
NO_SUCH_TOOL = ("curl", "wget")  # not in python:3.11-slim


# --------------------------------------------------------------------------- loading


def load_compose(text: str | None = None) -> Compose:
    """The compose data as a plain tree: anchors and merge keys resolved, nothing shared
    between services (so mutating one service of a copy leaves the others alone)."""
    data = yaml.safe_load(COMPOSE_FILE.read_text() if text is None else text)
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    tree: Compose = json.loads(json.dumps(data))
    return tree


def services(compose: Compose) -> dict[str, dict[str, Any]]:
    found = compose.get("services") or {}
    assert isinstance(found, dict)
    return found


def metastore_services(compose: Compose) -> dict[str, dict[str, Any]]:
    """The services built from this repository (the Dockerfile at its root)."""
    return {name: svc for name, svc in services(compose).items() if "build" in svc}


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as the container sees it (mapping or KEY=VALUE list)."""
    raw = service.get("environment") or {}
    pairs: list[tuple[str, Any]]
    if isinstance(raw, list):
        pairs = [
            (item.split("=", 1)[0], item.split("=", 1)[1] if "=" in item else None) for item in raw
        ]
    else:
        pairs = list(raw.items())
    env = {}
    for key, value in pairs:
        if value is None:  # passed through from the host: unknown here
            continue
        env[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def command(service: Mapping[str, Any]) -> list[str]:
    raw = service.get("command") or []
    return shlex.split(raw) if isinstance(raw, str) else [str(arg) for arg in raw]


class CommandError(Exception):
    pass


def parse(service: Mapping[str, Any]) -> argparse.Namespace:
    """Parse the service's command with the real CLI parser, in the service's environment
    (the topics subcommand reads METASTORE_KAFKA / METASTORE_TOPIC_PREFIX as defaults)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(environment(service))
    err = io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err):
        try:
            return _parser().parse_args(command(service))
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            raise CommandError(lines[-1] if lines else "exits without running") from None


def server_config(service: Mapping[str, Any], args: argparse.Namespace) -> ServerConfig:
    """What ``metastore serve`` would run with: flags over METASTORE_* over defaults."""
    overrides = {f.name: getattr(args, f.name, None) for f in fields(ServerConfig)}
    return ServerConfig.load(overrides, env=environment(service))


def role(name: str) -> tuple[str, ...]:
    """The subcommand each metastore service must run."""
    if name == "topics":
        return ("topics", "create")
    if NODE_NAME.fullmatch(name):
        return ("serve",)
    return ()


def subcommand(args: argparse.Namespace) -> tuple[str, ...]:
    action = getattr(args, "action", None)
    return (args.command, action) if action else (args.command,)


def nodes(compose: Compose) -> dict[str, ServerConfig]:
    """Every service that runs ``metastore serve`` and parses, with its resolved settings."""
    found = {}
    for name, svc in metastore_services(compose).items():
        try:
            args = parse(svc)
            if args.command == "serve":
                found[name] = server_config(svc, args)
        except (CommandError, ValueError, TypeError):
            continue  # reported by check_commands
    return found


def topic_jobs(compose: Compose) -> dict[str, argparse.Namespace]:
    found = {}
    for name, svc in metastore_services(compose).items():
        with contextlib.suppress(CommandError):
            args = parse(svc)
            if args.command == "topics":
                found[name] = args
    return found


def ports(service: Mapping[str, Any]) -> list[tuple[int | None, int]]:
    """(published host port, container port) of each entry, short or long syntax."""
    out: list[tuple[int | None, int]] = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            published = entry.get("published")
            out.append((int(published) if published else None, int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")
        out.append((int(parts[-2]) if len(parts) > 1 else None, int(parts[-1])))
    return out


def healthcheck_text(service: Mapping[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test") or []
    if isinstance(test, str):
        return test
    return " ".join(str(part) for part in test)


def _env_read_by_cli() -> frozenset[str]:
    """The METASTORE_* names the CLI's parser itself reads (the topics command's defaults)."""

    class Recorder(Mapping[str, str]):
        def __init__(self) -> None:
            self.read: set[str] = set()

        def __getitem__(self, key: str) -> str:
            self.read.add(key)
            raise KeyError(key)

        def __iter__(self) -> Iterator[str]:
            return iter(())

        def __len__(self) -> int:
            return 0

    recorder = Recorder()
    with mock.patch.object(os, "environ", recorder), contextlib.redirect_stderr(io.StringIO()):
        _parser()
    return frozenset(name for name in recorder.read if name.startswith(ENV_PREFIX))


TOPICS_ENV = _env_read_by_cli()
# read when `metastore topics` runs: the same Kafka connection settings as the nodes', and
# whether to create the events topic
KAFKA_ENV = frozenset({PROPERTIES_ENV, PROPERTIES_FILE_ENV, "METASTORE_PUBLISH_EVENTS"})
SERVE_ENV = frozenset(ENV_PREFIX + f.name.upper() for f in fields(ServerConfig))


# --------------------------------------------------------------------------- checks


def check_commands(compose: Compose) -> Problems:
    """Every metastore service's command parses into its intended subcommand; the nodes'
    settings pass ServerConfig's validation (e.g. the advertised URL rule) in cluster mode."""
    problems = []
    for name, svc in metastore_services(compose).items():
        expected = role(name)
        if not expected:
            problems.append(f"{name}: not a known metastore service (topics, metastore-N)")
            continue
        if "entrypoint" in svc:
            problems.append(f"{name}: overrides the image's entrypoint (metastore)")
        try:
            args = parse(svc)
        except CommandError as exc:
            problems.append(f"{name}: {command(svc)} is rejected by the CLI: {exc}")
            continue
        if subcommand(args) != expected:
            problems.append(f"{name}: runs {subcommand(args)}, expected {expected}")
            continue
        if args.command == "serve":
            try:
                config = server_config(svc, args)
            except (ValueError, TypeError) as exc:
                problems.append(f"{name}: invalid configuration: {exc}")
                continue
            if not config.cluster_mode:
                problems.append(f"{name}: runs embedded (no METASTORE_KAFKA / --kafka)")
    return problems


def _referenced(config: ServerConfig | None) -> frozenset[str]:
    """The variable the node's seeded storage names for its credentials, if any."""
    reference = config.seed_credentials if config is not None else None
    return frozenset({reference.env} if reference is not None and reference.env else ())


def check_environment(compose: Compose) -> Problems:
    """Every METASTORE_* variable is one the service's command actually reads (a node's
    storage credentials variable only if its storage names it)."""
    problems = []
    configs = nodes(compose)
    for name, svc in metastore_services(compose).items():
        known = TOPICS_ENV | KAFKA_ENV if role(name) == ("topics", "create") else SERVE_ENV
        known |= _referenced(configs.get(name))
        for key in environment(svc):
            if key.startswith(ENV_PREFIX) and key not in known:
                problems.append(f"{name}: {key} is not read by `metastore {' '.join(role(name))}`")
    return problems


def check_topics_agree(compose: Compose) -> Problems:
    """Nodes and the topics job name the same broker, prefix and partition count, and the
    broker address is one the Kafka service advertises to the containers."""
    problems = []
    jobs = topic_jobs(compose)
    if len(jobs) != 1:
        return [f"expected one `metastore topics create` job, found {sorted(jobs)}"]
    [(job_name, job)] = jobs.items()
    advertised = _advertised_listeners(compose)
    if job.kafka not in advertised:
        problems.append(f"{job_name}: --kafka {job.kafka} is not advertised by Kafka {advertised}")
    found = nodes(compose)
    if not found:
        problems.append("no metastore node")
    for name, config in found.items():
        if config.kafka != job.kafka:
            problems.append(f"{name}: kafka {config.kafka} != topics job's {job.kafka}")
        if config.topic_prefix != job.prefix:
            problems.append(f"{name}: topic prefix {config.topic_prefix} != {job.prefix}")
        if config.partitions != job.partitions:
            problems.append(f"{name}: partitions {config.partitions} != {job.partitions}")
    if len({config.cluster_id for config in found.values()}) > 1:
        problems.append("nodes disagree on the cluster id")
    try:
        job_properties = properties_from_env(environment(services(compose)[job_name]))
    except ValueError as exc:
        return [*problems, f"{job_name}: {exc}"]
    for name, config in found.items():
        if config.kafka_client_properties != job_properties:
            problems.append(f"{name}: Kafka properties differ from the topics job's")
    return problems


def check_security(compose: Compose) -> Problems:
    """The nodes run with auth on, a bootstrap client that is a service admin (else it
    could do nothing), and one cluster secret (the same on
    every node, or the nodes refuse each other's requests), and the file says to change
    the values it ships."""
    problems = []
    found = nodes(compose)
    for name, config in found.items():
        if not config.auth_enabled:
            problems.append(f"{name}: auth is off")
        if not config.clients:
            problems.append(f"{name}: no bootstrap client (METASTORE_AUTH_CLIENTS)")
        elif not {("service", c) for c in config.clients} & config.service_admins:
            problems.append(
                f"{name}: no bootstrap client is a service admin (METASTORE_AUTH_ADMINS)"
            )
        if len(config.cluster_key) < MIN_SECRET_LENGTH:
            problems.append(f"{name}: no cluster secret")
    if len({config.cluster_key for config in found.values()}) > 1:
        problems.append("the nodes' cluster secrets differ: they would refuse each other")
    if len({config.auth_clients for config in found.values()}) > 1:
        problems.append("the nodes bootstrap different clients")
    shipped = [c.cluster_key for c in found.values()] + [
        s for c in found.values() for s in c.clients.values()
    ]
    shipped += [
        value
        for svc in services(compose).values()
        for key, value in environment(svc).items()
        if key == "MINIO_ROOT_PASSWORD"
    ]
    if not all("CHANGE-ME" in value for value in shipped):
        problems.append("a shipped secret is not marked CHANGE-ME")
    return problems


def _minio(compose: Compose) -> tuple[str, dict[str, Any]] | None:
    found = [
        (name, svc)
        for name, svc in services(compose).items()
        if str(svc.get("image", "")).startswith("minio/minio:")
    ]
    return found[0] if len(found) == 1 else None


def _bucket_jobs(compose: Compose, bucket: str) -> list[str]:
    """The services whose command creates ``bucket`` with MinIO's client (``mc mb``)."""
    made = re.compile(rf"\bmc mb\b[^&;|]*?\S*/{re.escape(bucket)}(?=\s|$|[&;|])")
    return [
        name for name, svc in services(compose).items() if made.search(" ".join(command(svc)) + " ")
    ]


def check_storage(compose: Compose) -> Problems:
    """The nodes seed catalogs with one shared S3 warehouse: MinIO in the file, its bucket
    made by a one-shot job the nodes wait for, path-style addressing, credentials by
    reference to a variable every node has, equal to MinIO's root user and password."""
    problems: Problems = []
    found = nodes(compose)
    if not found:
        return ["no metastore node"]
    for setting in (
        "warehouse",
        "warehouse_io",
        "warehouse_credentials",
        "warehouse_vending",
        "warehouse_remote_signing",
        "storage_roots",
    ):
        if len({getattr(config, setting) for config in found.values()}) > 1:
            problems.append(f"the nodes' {setting} settings differ: they would seed differently")
    minio = _minio(compose)
    if minio is None:
        return [*problems, "expected exactly one service on the minio/minio image"]
    minio_name, minio_svc = minio
    minio_env = environment(minio_svc)
    if "/data" not in _volume_targets(minio_svc):
        problems.append(f"{minio_name}: /data is not on a named volume")
    for name, config in found.items():
        where = urlsplit(config.warehouse)
        if where.scheme != "s3" or not where.netloc:
            problems.append(f"{name}: warehouse {config.warehouse!r} is not an s3:// bucket")
            continue
        io = config.warehouse_properties
        endpoint = urlsplit(io.get("s3.endpoint", ""))
        if endpoint.hostname != minio_name or endpoint.port != 9000:
            problems.append(f"{name}: s3.endpoint {endpoint.geturl()!r} is not {minio_name}:9000")
        if io.get("s3.force-virtual-addressing") != "false":
            problems.append(f"{name}: MinIO needs path-style (s3.force-virtual-addressing false)")
        if any(is_secret_key(key) for key in io):
            problems.append(f"{name}: METASTORE_WAREHOUSE_IO holds secrets; give a reference")
        jobs = _bucket_jobs(compose, where.netloc)
        if not jobs:
            problems.append(f"{name}: no job creates the bucket {where.netloc!r}")
        depends = services(compose)[name].get("depends_on") or {}
        for job in jobs:
            got = depends.get(job, {}).get("condition") if isinstance(depends, dict) else None
            if got != "service_completed_successfully":
                problems.append(f"{name}: must wait for {job} to complete, got {got}")
        reference = config.seed_credentials
        if reference is None or reference.env is None or reference.env not in _referenced(config):
            problems.append(f"{name}: the storage credentials are not a variable reference")
            continue
        sources = CredentialSources(environment(services(compose)[name]))
        try:
            secrets = reference.resolve(sources)
        except StorageUnavailable as exc:
            problems.append(f"{name}: {exc.message}")
            continue
        pair = (secrets.get("s3.access-key-id"), secrets.get("s3.secret-access-key"))
        if pair != (minio_env.get("MINIO_ROOT_USER"), minio_env.get("MINIO_ROOT_PASSWORD")):
            problems.append(f"{name}: storage credentials do not match {minio_name}'s root user")
        problems += _signing_endpoints(name, config, minio_name, minio_svc)
    return problems


def _signing_endpoints(
    name: str, config: ServerConfig, minio_name: str, minio_svc: Mapping[str, Any]
) -> Problems:
    """Remote signing signs requests to MinIO as clients reach it: its service name, or
    the host's loopback on a port MinIO publishes for its S3 API."""
    published = {host for host, target in ports(minio_svc) if target == 9000 and host}
    problems = []
    for endpoint in config.seed_remote_signing.endpoints:
        where = urlsplit(endpoint)
        on_host = where.hostname in ("localhost", "127.0.0.1") and where.port in published
        if not on_host and (where.hostname, where.port) != (minio_name, 9000):
            problems.append(
                f"{name}: remote-signing endpoint {endpoint} is not {minio_name}:9000 or a"
                f" port {minio_name} publishes on the host"
            )
    return problems


def check_addresses(compose: Compose) -> Problems:
    """Each node advertises its own service name and its container port, publishes that
    port, and no two services publish the same host port."""
    problems = []
    for name, config in nodes(compose).items():
        svc = services(compose)[name]
        url = urlsplit(config.url)
        if url.hostname != name:
            problems.append(f"{name}: advertises {config.url}, which is not its service name")
        if url.port != config.port:
            problems.append(f"{name}: advertises port {url.port}, listens on {config.port}")
        if config.host != "0.0.0.0":
            problems.append(f"{name}: binds {config.host}, unreachable from other containers")
        if config.port not in [target for _, target in ports(svc)]:
            problems.append(f"{name}: does not publish its port {config.port}")
    seen: dict[int, str] = {}
    for name, svc in services(compose).items():
        for published, _ in ports(svc):
            if published is None:
                continue
            if published in seen:
                problems.append(f"{name}: host port {published} also used by {seen[published]}")
            seen[published] = name
    return problems


def _kafka(compose: Compose) -> tuple[str, dict[str, Any]] | None:
    found = [
        (name, svc)
        for name, svc in services(compose).items()
        if str(svc.get("image", "")).startswith("apache/kafka:")
    ]
    return found[0] if len(found) == 1 else None


def _advertised_listeners(compose: Compose) -> list[str]:
    """The HOST:PORT addresses Kafka advertises under a name other containers resolve."""
    kafka = _kafka(compose)
    if kafka is None:
        return []
    name, svc = kafka
    text = environment(svc).get("KAFKA_ADVERTISED_LISTENERS", "")
    addresses = [item.split("://", 1)[1] for item in text.split(",") if "://" in item]
    return [a for a in addresses if a.rsplit(":", 1)[0] in (name, svc.get("hostname"))]


def check_kafka(compose: Compose) -> Problems:
    """Apache Kafka, KRaft (combined broker+controller), single-replica internal topics
    including the transaction log (the owners use transactions), a broker health check."""
    kafka = _kafka(compose)
    if kafka is None:
        return ["expected exactly one service on the apache/kafka image"]
    name, svc = kafka
    problems = []
    if str(svc["image"]).endswith((":latest", ":")):
        problems.append(f"{name}: pin the Kafka image version")
    for other, other_svc in services(compose).items():
        if "zookeeper" in other or "zookeeper" in str(other_svc.get("image", "")):
            problems.append(f"{other}: ZooKeeper; Kafka must run in KRaft mode")
    env = environment(svc)
    if any("ZOOKEEPER" in key for key in env):
        problems.append(f"{name}: ZooKeeper settings; Kafka must run in KRaft mode")
    roles = set(env.get("KAFKA_PROCESS_ROLES", "").split(","))
    if roles != {"broker", "controller"}:
        problems.append(f"{name}: KAFKA_PROCESS_ROLES must be broker,controller, got {roles}")
    node_id = env.get("KAFKA_NODE_ID")
    if not node_id:
        problems.append(f"{name}: KAFKA_NODE_ID is missing")
    voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
    if not voters.startswith(f"{node_id}@"):
        problems.append(f"{name}: KAFKA_CONTROLLER_QUORUM_VOTERS must name node {node_id}")
    controller = env.get("KAFKA_CONTROLLER_LISTENER_NAMES", "")
    if not controller or f"{controller}://" not in env.get("KAFKA_LISTENERS", ""):
        problems.append(f"{name}: the controller listener is not among KAFKA_LISTENERS")
    for key, wanted in (
        ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1"),
        ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1"),
        ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1"),
    ):
        if env.get(key) != wanted:
            problems.append(f"{name}: {key} must be {wanted} on one broker, got {env.get(key)}")
    if env.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "true").lower() != "false":
        problems.append(f"{name}: topic auto-creation must be off (uncompacted topics)")
    if "kafka-broker-api-versions.sh" not in healthcheck_text(svc):
        problems.append(f"{name}: no broker health check (kafka-broker-api-versions.sh)")
    if env.get("KAFKA_LOG_DIRS") not in _volume_targets(svc):
        problems.append(f"{name}: KAFKA_LOG_DIRS is not on a named volume")
    version = str(svc["image"]).rpartition(":")[2]
    if version != kafka_version():
        problems.append(
            f"{name}: image apache/kafka:{version}, the tests run Kafka {kafka_version()}"
            " (harness/maven/kafka/pom.xml)"
        )
    harness = settings_for_tests(1)  # what the tests' single broker runs with
    for key in SHARED_BROKER_SETTINGS:
        variable = "KAFKA_" + key.upper().replace(".", "_")
        if env.get(variable, "").lower() != harness[key]:
            problems.append(
                f"{name}: {variable}={env.get(variable)}, the tests' broker runs {harness[key]}"
            )
    return problems


# broker settings the compose file's Kafka runs with as the tests' broker does
SHARED_BROKER_SETTINGS = (
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "group.initial.rebalance.delay.ms",
    "auto.create.topics.enable",
)


def kafka_version() -> str:
    """The Kafka version the tests run (the broker jars' POM)."""
    pom = (REPO / "harness" / "maven" / "kafka" / "pom.xml").read_text()
    found = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert found, "harness/maven/kafka/pom.xml names no kafka.version"
    return found[1]


def check_start_order(compose: Compose) -> Problems:
    """Topics wait for a healthy broker; nodes wait for the topics job to succeed (they
    refuse unsafe topics). Every service without a health check is a one-shot job some
    service waits for, so `docker compose up --wait` does not count its exit as failure."""
    problems = []
    kafka = _kafka(compose)
    kafka_name = kafka[0] if kafka else "kafka"
    wanted: dict[str, dict[str, str]] = {
        name: {kafka_name: "service_healthy"} for name in topic_jobs(compose)
    }
    for name in nodes(compose):
        wanted[name] = {kafka_name: "service_healthy"}
        wanted[name].update({job: "service_completed_successfully" for job in topic_jobs(compose)})
    for name, conditions in wanted.items():
        depends = services(compose)[name].get("depends_on") or {}
        for dep, condition in conditions.items():
            got = depends.get(dep, {}).get("condition") if isinstance(depends, dict) else None
            if got != condition:
                problems.append(f"{name}: depends_on {dep} must be {condition}, got {got}")
    awaited = {
        dep
        for svc in services(compose).values()
        if isinstance(svc.get("depends_on"), dict)
        for dep, spec in svc["depends_on"].items()
        if (spec or {}).get("condition") == "service_completed_successfully"
    }
    for name, svc in services(compose).items():
        if "healthcheck" not in svc and name not in awaited:
            problems.append(f"{name}: neither health-checked nor awaited as a one-shot job")
        if name in awaited and svc.get("restart", "no") != "no":
            problems.append(f"{name}: a one-shot job must not restart")
        if name not in awaited and svc.get("restart") not in ("unless-stopped", "always"):
            problems.append(f"{name}: a long-running service needs a restart policy")
    return problems


def check_healthchecks(compose: Compose) -> Problems:
    """Every node has a health check on its own /health that needs no curl."""
    problems = []
    for name, config in nodes(compose).items():
        svc = services(compose)[name]
        text = healthcheck_text(svc)
        test = (svc.get("healthcheck") or {}).get("test") or []
        if not text or (svc.get("healthcheck") or {}).get("disable"):
            problems.append(f"{name}: no health check")
            continue
        if any(tool in text.split() for tool in NO_SUCH_TOOL):
            problems.append(f"{name}: the health check uses a tool the image lacks")
        if isinstance(test, list) and test[:2] not in (["CMD", "python"], ["CMD", "python3"]):
            problems.append(f"{name}: the health check must run python, got {test[:2]}")
        match = HEALTH_URL.search(text)
        if match is None or int(match.group(1)) != config.port:
            problems.append(f"{name}: the health check must GET :{config.port}/health")
    return problems


def _mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each volume entry, short or long syntax."""
    out = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            out.append((str(entry.get("source")), str(entry.get("target"))))
        else:
            source, target = str(entry).split(":")[:2]
            out.append((source, target))
    return out


def _volume_targets(service: Mapping[str, Any]) -> list[str]:
    return [target for _, target in _mounts(service)]


def check_volumes(compose: Compose) -> Problems:
    """Each node keeps its view in its own named volume mounted at its data dir."""
    problems = []
    declared = set(compose.get("volumes") or {})
    owners: dict[str, str] = {}
    for name, config in nodes(compose).items():
        sources = [s for s, t in _mounts(services(compose)[name]) if t == str(config.data_dir)]
        if not sources or sources[0] not in declared:
            problems.append(f"{name}: data dir {config.data_dir} is not a named volume")
            continue
        if sources[0] in owners:
            problems.append(f"{name}: shares volume {sources[0]} with {owners[sources[0]]}")
        owners[sources[0]] = name
    return problems


def check_build(compose: Compose) -> Problems:
    """The metastore services are built from the Dockerfile at the repository root."""
    problems = []
    images = set()
    for name, svc in metastore_services(compose).items():
        build = svc["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = (
            "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        )
        if (COMPOSE_FILE.parent / context / dockerfile).resolve() != DOCKERFILE:
            problems.append(f"{name}: not built from {DOCKERFILE.name} at the repository root")
        images.add(svc.get("image"))
    if len(images) > 1:
        problems.append(f"the metastore services tag different images: {images}")
    return problems


def check_dockerfile(dockerfile: str, dockerignore: str, pyproject: Mapping[str, Any]) -> Problems:
    """python:3.11-slim, installs the package from everything its wheel is built from (and
    none of that is ignored), runs as a non-root user, entrypoint `metastore`."""
    problems = []
    lines = [line.strip() for line in dockerfile.replace("\\\n", " ").splitlines()]
    instructions = [line.split(None, 1) for line in lines if line and not line.startswith("#")]
    by_kind: dict[str, list[str]] = {}
    for kind, *rest in instructions:
        by_kind.setdefault(kind.upper(), []).append(rest[0] if rest else "")
    if by_kind.get("FROM", [""])[0].split()[0] != "python:3.11-slim":
        problems.append("the image must be based on python:3.11-slim")
    entrypoints = by_kind.get("ENTRYPOINT", [])
    try:
        entrypoint = json.loads(entrypoints[-1]) if entrypoints else None
    except json.JSONDecodeError:
        entrypoint = None
    if entrypoint != ["metastore"]:
        problems.append(f'ENTRYPOINT must be ["metastore"] (exec form), got {entrypoints}')
    users = by_kind.get("USER", [])
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("the container must run as a non-root user")
    if not any(re.search(r"\bpip install\b.*\s\.(\s|$)", run) for run in by_kind.get("RUN", [])):
        problems.append("the package is not installed with `pip install .`")
    copied = {src.rstrip("/") for args in by_kind.get("COPY", []) for src in args.split()[:-1]}
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], *wheel["packages"]}
    needed.update(wheel.get("force-include", {}))
    ignored = [p.strip() for p in dockerignore.splitlines() if p.strip() and p[0] != "#"]
    for path in sorted(needed):
        if path not in copied:
            problems.append(f"the wheel needs {path}, which the Dockerfile does not COPY")
        if any(fnmatch(path, pattern.strip("/")) for pattern in ignored):
            problems.append(f"the wheel needs {path}, which .dockerignore excludes")
    return problems


def check_makefile(makefile: str) -> Problems:
    problems = []
    phony = next((line for line in makefile.splitlines() if line.startswith(".PHONY:")), "")
    for target, recipe in (
        ("cluster-up", "docker compose up -d --build --wait"),
        ("cluster-down", "docker compose down -v"),
        ("cluster-logs", "docker compose logs -f"),
    ):
        match = re.search(rf"^{target}:.*## .+\n\t(.+)$", makefile, re.MULTILINE)
        if match is None or not match.group(1).startswith(recipe):
            problems.append(f"{target}: missing, undocumented in help, or not `{recipe}`")
        if target not in phony.split():
            problems.append(f"{target}: not .PHONY")
    return problems


# --------------------------------------------------------------------------- the real files


def _real_dockerfile_problems() -> Problems:
    return check_dockerfile(
        DOCKERFILE.read_text(), DOCKERIGNORE.read_text(), tomllib.loads(PYPROJECT.read_text())
    )


# --------------------------------------------------------------------------- observability

OBSERVABILITY = "observability"  # the profile of Prometheus and Grafana
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
GRAFANA_PROVISIONING = "/etc/grafana/provisioning"
METRIC = re.compile(r"\bmetastore_[a-z0-9_]+")
SERIES_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def exposed_metrics() -> frozenset[str]:
    """Every metric family a node's /metrics can hold: the histograms and gauges of its
    registry (``metastore.util.metrics``, the view's lag included), and the running totals
    its stats name (the ``metastore_...`` names in the node's code)."""
    metrics = NodeMetrics()
    metrics.watch_view(lambda: (0, 0.0))
    names = {family.name for family in metrics.registry.collect()}
    for path in (REPO / "metastore").rglob("*.py"):
        names |= set(re.findall(r"""['"](metastore_[a-z0-9_]+)""", path.read_text()))
    return frozenset(names)


def _mounted_source(service: Mapping[str, Any], target: str) -> Path | None:
    for source, mounted in _mounts(service):
        if mounted == target and source.startswith("."):
            return (COMPOSE_FILE.parent / source).resolve()
    return None


def _image_service(compose: Compose, prefix: str) -> tuple[str, dict[str, Any]] | None:
    found = [
        (n, s) for n, s in services(compose).items() if str(s.get("image", "")).startswith(prefix)
    ]
    return found[0] if len(found) == 1 else None


def dashboard_problems(dashboard: Mapping[str, Any], datasource_uid: str) -> Problems:
    """Every query of the dashboard names only metrics a node exposes, on the provisioned
    Prometheus data source."""
    problems = []
    exposed = exposed_metrics()
    queries: list[tuple[str, str, Any]] = []
    stack = list(dashboard.get("panels") or [])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels") or [])
        for target in panel.get("targets") or []:
            queries.append(
                (panel.get("title", "?"), target.get("expr", ""), panel.get("datasource"))
            )
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        queries.append((f"${variable.get('name')}", text, variable.get("datasource")))
    if not queries:
        problems.append("the dashboard has no queries")
    for title, expr, datasource in queries:
        if not isinstance(datasource, dict) or datasource.get("uid") != datasource_uid:
            problems.append(f"dashboard {title!r}: not on the data source {datasource_uid!r}")
        for name in METRIC.findall(expr):
            base = next((name.removesuffix(s) for s in SERIES_SUFFIXES if name.endswith(s)), name)
            if name not in exposed and base not in exposed:
                problems.append(f"dashboard {title!r}: {name} is not a metric the node exposes")
    return problems


def check_observability(compose: Compose) -> Problems:
    """Prometheus and Grafana, under the profile ``observability`` only, on pinned images:
    Prometheus scrapes every node's /metrics at its advertised address; Grafana reads it
    through a provisioned data source and loads the dashboard, whose queries name only
    metrics a node exposes."""
    problems = []
    prometheus = _image_service(compose, "prom/prometheus:")
    grafana = _image_service(compose, "grafana/grafana:")
    if prometheus is None or grafana is None:
        return ["expected one prom/prometheus and one grafana/grafana service"]
    for name, svc in (prometheus, grafana):
        if svc.get("profiles") != [OBSERVABILITY]:
            problems.append(f"{name}: must run only under the profile {OBSERVABILITY}")
        tag = str(svc["image"]).rpartition(":")[2]
        if tag == "latest" or not re.search(r"\d", tag):
            problems.append(f"{name}: pin the image version, got {svc['image']}")
    name, svc = prometheus
    config_path = _mounted_source(svc, PROMETHEUS_CONFIG)
    if config_path is None or not config_path.is_file():
        return [*problems, f"{name}: no prometheus.yml from the repository at {PROMETHEUS_CONFIG}"]
    config = yaml.safe_load(config_path.read_text())
    scraped = {
        target
        for job in config.get("scrape_configs") or []
        if job.get("metrics_path", "/metrics") == "/metrics"
        for static in job.get("static_configs") or []
        for target in static.get("targets") or []
    }
    for node, settings in nodes(compose).items():
        address = urlsplit(settings.url).netloc
        if address not in scraped:
            problems.append(f"{name}: does not scrape {node} at {address}/metrics")
        if settings.metrics_auth and "authorization" not in config_path.read_text():
            problems.append(f"{node}: /metrics needs a token Prometheus does not send")
    name, svc = grafana
    if (svc.get("depends_on") or {}).get(prometheus[0], {}).get("condition") != "service_healthy":
        problems.append(f"{name}: depends_on {prometheus[0]} must be service_healthy")
    if "CHANGE-ME" not in environment(svc).get("GF_SECURITY_ADMIN_PASSWORD", ""):
        problems.append(f"{name}: the admin password is not marked CHANGE-ME")
    provisioning = _mounted_source(svc, GRAFANA_PROVISIONING)
    if provisioning is None or not provisioning.is_dir():
        return [*problems, f"{name}: no provisioning directory at {GRAFANA_PROVISIONING}"]
    sources = [
        source
        for path in sorted((provisioning / "datasources").glob("*.yml"))
        for source in yaml.safe_load(path.read_text()).get("datasources") or []
    ]
    wanted = f"http://{prometheus[0]}:9090"
    prometheus_sources = [s for s in sources if s.get("url") == wanted]
    if len(prometheus_sources) != 1:
        return [*problems, f"{name}: no data source on {wanted}"]
    folders = [
        provider["options"]["path"]
        for path in sorted((provisioning / "dashboards").glob("*.yml"))
        for provider in yaml.safe_load(path.read_text()).get("providers") or []
    ]
    dashboards = [
        source
        for source, target in _mounts(svc)
        if target.endswith(".json") and any(target.startswith(f + "/") for f in folders)
    ]
    if not dashboards:
        return [*problems, f"{name}: no dashboard mounted where a provider reads ({folders})"]
    for source in dashboards:
        dashboard = json.loads((COMPOSE_FILE.parent / source).read_text())
        problems += dashboard_problems(dashboard, prometheus_sources[0]["uid"])
    return problems


COMPOSE_CHECKS: list[Callable[[Compose], Problems]] = [
    check_commands,
    check_environment,
    check_topics_agree,
    check_addresses,
    check_kafka,
    check_start_order,
    check_healthchecks,
    check_volumes,
    check_build,
    check_security,
    check_storage,
    check_observability,
]


@pytest.mark.parametrize("check", COMPOSE_CHECKS, ids=lambda check: check.__name__)
def test_compose_file_passes(check: Callable[[Compose], Problems]) -> None:
    assert check(load_compose()) == []


def test_compose_file_shape() -> None:
    """What the README promises: Kafka, one topics job, three nodes on 8181-8183."""
    compose = load_compose()
    assert sorted(metastore_services(compose)) == [
        "metastore-1",
        "metastore-2",
        "metastore-3",
        "topics",
    ]
    assert sorted(nodes(compose)) == ["metastore-1", "metastore-2", "metastore-3"]
    published = {
        name: [host for host, _ in ports(services(compose)[name])] for name in nodes(compose)
    }
    assert published == {"metastore-1": [8181], "metastore-2": [8182], "metastore-3": [8183]}
    assert {config.url for config in nodes(compose).values()} == {
        f"http://metastore-{n}:8181" for n in (1, 2, 3)
    }
    assert sorted(TOPICS_ENV) == [  # the parser's defaults: topics, the jobs' client
        "METASTORE_CREDENTIAL",
        "METASTORE_KAFKA",
        "METASTORE_TOKEN",
        "METASTORE_TOPIC_PREFIX",
    ]


def test_dockerfile_passes() -> None:
    assert _real_dockerfile_problems() == []


def test_makefile_passes() -> None:
    assert check_makefile(MAKEFILE.read_text()) == []


# --------------------------------------------------------------------------- each check can fail


def _node(compose: Compose, n: int = 1) -> dict[str, Any]:
    return services(compose)[f"metastore-{n}"]


def _set_arg(cmd: list[str], flag: str, value: str) -> list[str]:
    return [f"{flag}={value}" if arg.startswith(f"{flag}=") else arg for arg in cmd]


def _bogus_flag(c: Compose) -> None:
    _node(c)["command"] = [*command(_node(c)), "--bogus"]


def _wrong_subcommand(c: Compose) -> None:
    services(c)["topics"]["command"] = ["topics", "describe"]


def _no_advertised_url(c: Compose) -> None:
    _node(c)["command"] = [a for a in command(_node(c)) if not a.startswith("--advertised-url")]


def _embedded(c: Compose) -> None:
    del _node(c)["environment"]["METASTORE_KAFKA"]


def _unknown_env(c: Compose) -> None:
    _node(c)["environment"]["METASTORE_NOT_A_SETTING"] = "1"


def _serve_env_on_topics(c: Compose) -> None:
    services(c)["topics"]["environment"]["METASTORE_PARTITIONS"] = "12"


def _partitions_differ(c: Compose) -> None:
    _node(c, 2)["environment"]["METASTORE_PARTITIONS"] = "6"


def _prefix_differs(c: Compose) -> None:
    services(c)["topics"]["command"] = [*command(services(c)["topics"]), "--prefix", "other"]


def _host_listener(c: Compose) -> None:
    services(c)["topics"]["environment"]["METASTORE_KAFKA"] = "localhost:29092"


def _advertises_other_node(c: Compose) -> None:
    cmd = command(_node(c, 3))
    _node(c, 3)["command"] = _set_arg(cmd, "--advertised-url", "http://metastore-1:8181")


def _advertises_other_port(c: Compose) -> None:
    cmd = command(_node(c, 2))
    _node(c, 2)["command"] = _set_arg(cmd, "--advertised-url", "http://metastore-2:9000")


def _duplicate_host_port(c: Compose) -> None:
    _node(c, 2)["ports"] = ["8181:8181"]


def _zookeeper(c: Compose) -> None:
    services(c)["zookeeper"] = {"image": "zookeeper:3.9", "healthcheck": {"test": ["CMD", "true"]}}


def _no_txn_min_isr(c: Compose) -> None:
    del services(c)["kafka"]["environment"]["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]


def _other_kafka_version(c: Compose) -> None:
    services(c)["kafka"]["image"] = "apache/kafka:3.9.1"


def _rebalance_delay(c: Compose) -> None:
    services(c)["kafka"]["environment"]["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] = 3000


def _broker_only(c: Compose) -> None:
    services(c)["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] = "broker"


def _no_kafka_healthcheck(c: Compose) -> None:
    del services(c)["kafka"]["healthcheck"]


def _node_starts_early(c: Compose) -> None:
    _node(c)["depends_on"]["topics"]["condition"] = "service_started"


def _topics_start_early(c: Compose) -> None:
    services(c)["topics"]["depends_on"]["kafka"]["condition"] = "service_started"


def _orphan_job(c: Compose) -> None:
    for n in (1, 2, 3):
        del _node(c, n)["depends_on"]["topics"]


def _no_node_healthcheck(c: Compose) -> None:
    del _node(c, 2)["healthcheck"]


def _curl_healthcheck(c: Compose) -> None:
    _node(c)["healthcheck"]["test"] = ["CMD", "curl", "-f", "http://127.0.0.1:8181/health"]


def _healthcheck_wrong_port(c: Compose) -> None:
    test = _node(c)["healthcheck"]["test"]
    _node(c)["healthcheck"]["test"] = [part.replace(":8181/", ":8182/") for part in test]


def _shared_volume(c: Compose) -> None:
    _node(c, 2)["volumes"] = ["metastore-1-data:/data"]


def _data_dir_not_on_volume(c: Compose) -> None:
    _node(c)["command"] = _set_arg(command(_node(c)), "--data-dir", "/tmp/data")


def _other_build_context(c: Compose) -> None:
    _node(c)["build"] = "./docs"


def _no_cluster_secret(c: Compose) -> None:
    del _node(c, 3)["environment"]["METASTORE_CLUSTER_SECRET"]


def _short_cluster_secret(c: Compose) -> None:
    _node(c, 2)["environment"]["METASTORE_CLUSTER_SECRET"] = "CHANGE-ME-short"


def _other_cluster_secret(c: Compose) -> None:
    _node(c, 2)["environment"]["METASTORE_CLUSTER_SECRET"] = "CHANGE-ME-" + "x" * 40


def _auth_off(c: Compose) -> None:
    _node(c)["environment"]["METASTORE_AUTH"] = "off"


def _no_clients(c: Compose) -> None:
    del _node(c)["environment"]["METASTORE_AUTH_CLIENTS"]


def _no_admins(c: Compose) -> None:
    del _node(c, 2)["environment"]["METASTORE_AUTH_ADMINS"]


def _real_looking_secret(c: Compose) -> None:
    for n in (1, 2, 3):
        _node(c, n)["environment"]["METASTORE_CLUSTER_SECRET"] = "s" * 40


def _refused_kafka_property(c: Compose) -> None:
    _node(c)["environment"][PROPERTIES_ENV] = '{"enable.auto.commit": "true"}'


def _kafka_properties_differ(c: Compose) -> None:
    _node(c)["environment"][PROPERTIES_ENV] = '{"security.protocol": "SSL"}'


def _kafka_properties_on_topics(c: Compose) -> None:
    services(c)["topics"]["environment"][PROPERTIES_ENV] = '{"security.protocol": "SSL"}'


def _every_node(c: Compose, key: str, value: str | None) -> None:
    for n in (1, 2, 3):
        if value is None:
            del _node(c, n)["environment"][key]
        else:
            _node(c, n)["environment"][key] = value


def _node_local_warehouse(c: Compose) -> None:
    del _node(c)["environment"]["METASTORE_WAREHOUSE"]
    del _node(c)["environment"]["METASTORE_STORAGE_ROOTS"]  # (else: it misses the default)


def _warehouses_differ(c: Compose) -> None:
    _node(c, 2)["environment"]["METASTORE_WAREHOUSE"] = "s3://warehouse/elsewhere"


def _file_warehouse(c: Compose) -> None:
    _every_node(c, "METASTORE_WAREHOUSE", "file:///data/warehouse")
    _every_node(c, "METASTORE_STORAGE_ROOTS", None)
    _every_node(c, "METASTORE_WAREHOUSE_REMOTE_SIGNING", None)  # S3 only: else no node starts


def _secrets_in_io(c: Compose) -> None:
    io = {
        "s3.endpoint": "http://minio:9000",
        "s3.force-virtual-addressing": "false",
        "s3.secret-access-key": "CHANGE-ME-minio-secret",
    }
    _every_node(c, "METASTORE_WAREHOUSE_IO", json.dumps(io))
    _every_node(c, "METASTORE_WAREHOUSE_CREDENTIALS", None)


def _virtual_hosts(c: Compose) -> None:
    io = {"s3.endpoint": "http://minio:9000", "s3.force-virtual-addressing": "true"}
    _every_node(c, "METASTORE_WAREHOUSE_IO", json.dumps(io))


def _endpoint_on_the_host(c: Compose) -> None:
    io = {"s3.endpoint": "http://localhost:9000", "s3.force-virtual-addressing": "false"}
    _every_node(c, "METASTORE_WAREHOUSE_IO", json.dumps(io))


def _wrong_storage_secret(c: Compose) -> None:
    keys = {"s3.access-key-id": "metastore", "s3.secret-access-key": "CHANGE-ME-other"}
    _every_node(c, "METASTORE_STORAGE_CREDENTIALS_MINIO", json.dumps(keys))


def _missing_storage_secret(c: Compose) -> None:
    _every_node(c, "METASTORE_STORAGE_CREDENTIALS_MINIO", None)


def _unreferenced_storage_variable(c: Compose) -> None:
    _node(c)["environment"]["METASTORE_STORAGE_CREDENTIALS_OTHER"] = "{}"


def _signing_elsewhere(c: Compose) -> None:
    signing = {"enabled": False, "endpoints": ["http://localhost:9999"]}
    _every_node(c, "METASTORE_WAREHOUSE_REMOTE_SIGNING", json.dumps(signing))


def _signing_differs(c: Compose) -> None:
    _node(c, 2)["environment"]["METASTORE_WAREHOUSE_REMOTE_SIGNING"] = '{"enabled": true}'


def _no_bucket_job(c: Compose) -> None:
    services(c)["bucket"]["command"] = ["mc ls local"]


def _node_before_bucket(c: Compose) -> None:
    _node(c, 3)["depends_on"]["bucket"]["condition"] = "service_started"


def _minio_real_looking_password(c: Compose) -> None:
    services(c)["minio"]["environment"]["MINIO_ROOT_PASSWORD"] = "p" * 20


def _observability_always_on(c: Compose) -> None:
    del services(c)["grafana"]["profiles"]


def _latest_prometheus(c: Compose) -> None:
    services(c)["prometheus"]["image"] = "prom/prometheus:latest"


def _node_not_scraped(c: Compose) -> None:
    node = _node(c, 3)
    node["command"] = _set_arg(node["command"], "--advertised-url", "http://metastore-9:8181")


def _grafana_real_password(c: Compose) -> None:
    services(c)["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] = "p" * 20


def _no_dashboard(c: Compose) -> None:
    services(c)["grafana"]["volumes"] = [
        v for v in services(c)["grafana"]["volumes"] if not str(v).endswith(".json:ro")
    ]


CASES: list[tuple[Callable[[Compose], None], Callable[[Compose], Problems], str]] = [
    (_node_local_warehouse, check_commands, "a cluster needs shared storage"),
    (_warehouses_differ, check_storage, "warehouse settings differ"),
    (_file_warehouse, check_storage, "is not an s3:// bucket"),
    (_secrets_in_io, check_storage, "METASTORE_WAREHOUSE_IO holds secrets"),
    (_virtual_hosts, check_storage, "path-style"),
    (_endpoint_on_the_host, check_storage, "is not minio:9000"),
    (_wrong_storage_secret, check_storage, "do not match minio's root user"),
    (_missing_storage_secret, check_storage, "is not set on this node"),
    (_unreferenced_storage_variable, check_environment, "METASTORE_STORAGE_CREDENTIALS_OTHER"),
    (_no_bucket_job, check_storage, "no job creates the bucket 'warehouse'"),
    (_signing_elsewhere, check_storage, "remote-signing endpoint http://localhost:9999"),
    (_signing_differs, check_storage, "warehouse_remote_signing settings differ"),
    (_node_before_bucket, check_storage, "metastore-3: must wait for bucket"),
    (_minio_real_looking_password, check_security, "not marked CHANGE-ME"),
    (_bogus_flag, check_commands, "rejected by the CLI"),
    (_wrong_subcommand, check_commands, "expected ('topics', 'create')"),
    (_no_advertised_url, check_commands, "--advertised-url: not set; required when binding"),
    (_embedded, check_commands, "runs embedded"),
    (_unknown_env, check_environment, "METASTORE_NOT_A_SETTING"),
    (_serve_env_on_topics, check_environment, "topics: METASTORE_PARTITIONS"),
    (_partitions_differ, check_topics_agree, "metastore-2: partitions 6 != 12"),
    (_prefix_differs, check_topics_agree, "topic prefix metastore != other"),
    (_host_listener, check_topics_agree, "not advertised by Kafka"),
    (_advertises_other_node, check_addresses, "metastore-3: advertises"),
    (_advertises_other_port, check_addresses, "advertises port 9000"),
    (_duplicate_host_port, check_addresses, "host port 8181 also used"),
    (_zookeeper, check_kafka, "KRaft"),
    (_no_txn_min_isr, check_kafka, "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"),
    (_broker_only, check_kafka, "KAFKA_PROCESS_ROLES"),
    (_other_kafka_version, check_kafka, "the tests run Kafka"),
    (_rebalance_delay, check_kafka, "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"),
    (_no_kafka_healthcheck, check_kafka, "no broker health check"),
    (_node_starts_early, check_start_order, "service_completed_successfully"),
    (_topics_start_early, check_start_order, "topics: depends_on kafka"),
    (_orphan_job, check_start_order, "neither health-checked nor awaited"),
    (_no_node_healthcheck, check_healthchecks, "metastore-2: no health check"),
    (_curl_healthcheck, check_healthchecks, "lacks"),
    (_healthcheck_wrong_port, check_healthchecks, "must GET :8181/health"),
    (_no_node_healthcheck, check_start_order, "metastore-2: neither health-checked"),
    (_shared_volume, check_volumes, "shares volume metastore-1-data"),
    (_data_dir_not_on_volume, check_volumes, "not a named volume"),
    (_other_build_context, check_build, "not built from Dockerfile"),
    (_no_cluster_secret, check_commands, "needs a cluster secret"),
    (_short_cluster_secret, check_commands, "at least 32 characters"),
    (_other_cluster_secret, check_security, "cluster secrets differ"),
    (_auth_off, check_security, "metastore-1: auth is off"),
    (_no_clients, check_security, "metastore-1: no bootstrap client"),
    (_no_admins, check_security, "metastore-2: no bootstrap client is a service admin"),
    (_real_looking_secret, check_security, "not marked CHANGE-ME"),
    (_refused_kafka_property, check_commands, "'enable.auto.commit' may not be set"),
    (_kafka_properties_differ, check_topics_agree, "metastore-1: Kafka properties differ"),
    (_kafka_properties_on_topics, check_topics_agree, "Kafka properties differ"),
    (_observability_always_on, check_observability, "grafana: must run only under the profile"),
    (_latest_prometheus, check_observability, "prometheus: pin the image version"),
    (_node_not_scraped, check_observability, "does not scrape metastore-3 at metastore-9:8181"),
    (_grafana_real_password, check_observability, "not marked CHANGE-ME"),
    (_no_dashboard, check_observability, "no dashboard mounted"),
]


@pytest.mark.parametrize(
    ("breakage", "check", "expected"),
    CASES,
    ids=[f"{check.__name__}:{breakage.__name__.strip('_')}" for breakage, check, _ in CASES],
)
def test_checker_rejects(
    breakage: Callable[[Compose], None], check: Callable[[Compose], Problems], expected: str
) -> None:
    compose = load_compose()
    breakage(compose)
    problems = check(compose)
    assert any(expected in problem for problem in problems), problems
    assert check(load_compose()) == [], "a broken copy must not change the file's data"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('ENTRYPOINT ["metastore"]', 'ENTRYPOINT ["python", "-m", "metastore"]', "ENTRYPOINT"),
        ('ENTRYPOINT ["metastore"]', "ENTRYPOINT metastore", "ENTRYPOINT"),
        ("FROM python:3.11-slim", "FROM python:3.12-slim", "python:3.11-slim"),
        ("USER metastore", "USER root", "non-root"),
        ("COPY topics ./topics\n", "", "needs topics"),
        ("COPY pyproject.toml README.md ./", "COPY pyproject.toml ./", "needs README.md"),
    ],
)
def test_dockerfile_checker_rejects(old: str, new: str, expected: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    problems = check_dockerfile(
        text.replace(old, new), DOCKERIGNORE.read_text(), tomllib.loads(PYPROJECT.read_text())
    )
    assert any(expected in problem for problem in problems), problems


def test_dockerignore_must_not_exclude_what_the_wheel_needs() -> None:
    pyproject = tomllib.loads(PYPROJECT.read_text())
    ignore = DOCKERIGNORE.read_text() + "\nschemas\n*.md\n"
    problems = check_dockerfile(DOCKERFILE.read_text(), ignore, pyproject)
    assert "the wheel needs schemas, which .dockerignore excludes" in problems
    assert "the wheel needs README.md, which .dockerignore excludes" in problems


def test_makefile_checker_rejects() -> None:
    text = MAKEFILE.read_text()
    broken = text.replace("docker compose down -v", "docker compose down")
    assert any("cluster-down" in p for p in check_makefile(broken))
    broken = text.replace(" cluster-logs\n", "\n", 1)
    assert any("cluster-logs: not .PHONY" in p for p in check_makefile(broken))


def test_compose_text_forms_are_understood() -> None:
    """The helpers read compose's other spellings (string command, list environment,
    long port syntax), so a restyled file is still checked, not skipped."""
    compose = load_compose()
    node = _node(compose)
    node["command"] = shlex.join(command(node))
    node["environment"] = [f"{k}={v}" for k, v in environment(node).items()]
    node["ports"] = [{"target": 8181, "published": "8181"}]
    for check in COMPOSE_CHECKS:
        assert check(compose) == [], check.__name__


DASHBOARD = REPO / "docs" / "grafana" / "metastore.json"


def test_the_dashboard_names_only_metrics_the_node_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard_problems(dashboard, "prometheus") == []
    exprs = json.dumps(dashboard)
    for family in (  # every kind of histogram has a panel
        "metastore_http_request_duration_seconds",
        "metastore_commit_duration_seconds",
        "metastore_commit_group_commits",
        "metastore_durable_write_duration_seconds",
        "metastore_forward_duration_seconds",
        "metastore_owner_transaction_duration_seconds",
        "metastore_job_run_duration_seconds",
        "metastore_view_lag_records",
        "metastore_view_lag_seconds",
    ):
        assert family in exprs, family


def test_the_dashboard_check_rejects_an_unknown_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panel = next(p for p in dashboard["panels"] if p.get("targets"))
    panel["targets"][0]["expr"] = "rate(metastore_no_such_thing_total[5m])"
    problems = dashboard_problems(dashboard, "prometheus")
    assert any("metastore_no_such_thing_total is not a metric" in p for p in problems), problems
