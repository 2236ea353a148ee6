"""The changelog topics of the cluster mode: declared in ``topics/metastore.json``,
created idempotently, checked before a node trusts them.

Two key-compacted topics hold the metastore's tables (KLIP-18): ``<prefix>.refs``
and ``<prefix>.objects``. A wrong topic loses data quietly (a ``delete`` policy
expires tables after a week; a different partition count moves catalogs between
partitions), so ``check`` lists every problem with the command that fixes it and
``ensure_safe`` refuses to run a node on unsafe topics.

With ``publish_events`` the cluster has a third topic, ``<prefix>.events``
(``topics/events.json``): a log of change events with a ``delete`` policy and a
finite retention, checked by the same rules otherwise (partition count, replicas,
``min.insync.replicas``, unclean election); a node that publishes refuses to start
without it, and ``create`` creates it for such a configuration.

Never trust a topic's mere presence: brokers auto-create missing topics on a
metadata request naming them (with their default partition count and no configs).
So existence is read from a full topic listing, which names no topic and creates
none, and a config the broker does not report counts as Kafka's default
(``cleanup.policy`` unset means ``delete``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the documented path, no __all__
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from metastore.cluster.changelog_records import ROLES
from metastore.cluster.cluster_config import ClusterConfig
from metastore.engine.commits import DEFAULT_MAX_OBJECT_BYTES
from metastore.errors import MetastoreError
from metastore.util.resources import topics_dir

T = TypeVar("T")
SPEC_FILE = "metastore.json"
EVENTS_SPEC_FILE = "events.json"
EVENTS: Literal["events"] = "events"
TopicRole = Literal["refs", "objects", "events"]

DEFAULT_TIMEOUT_S = 10.0
# A record batch must hold the largest object plus its key, headers and batch overhead.
MIN_MESSAGE_BYTES = DEFAULT_MAX_OBJECT_BYTES + 64 * 1024
# What Kafka assumes for a topic config it has no explicit value for. Some brokers
# (Tansu) report only explicitly set configs, so a missing one means this.
KAFKA_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "max.message.bytes": "1048588",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
}
_DERIVED = ("min.insync.replicas",)  # from the replication factor, never from the file


class TopicsError(MetastoreError):
    """The broker could not be asked (unreachable, timeout, refused request)."""

    status = 503
    error_type = "ServiceUnavailableException"
    kafka_code: int | None = None  # the broker's error code, when it answered with one


class UnsafeTopics(MetastoreError):
    """The changelog topics are missing or configured so that data could be lost."""

    status = 503
    error_type = "ServiceUnavailableException"

    def __init__(self, config: ClusterConfig, problems: list[str]) -> None:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(
            f"unsafe changelog topics on {config.bootstrap} (prefix {config.prefix!r}); "
            f"fix these, then start again:\n{lines}"
        )
        self.problems = problems


@dataclass(frozen=True, slots=True)
class TopicSpec:
    role: TopicRole
    suffix: str
    config: Mapping[str, str]
    description: str = ""

    def name(self, cluster: ClusterConfig) -> str:
        return cluster.topic(self.role)

    def configs_for(self, cluster: ClusterConfig) -> dict[str, str]:
        """The topic configs to create it with: the file's plus the derived ones."""
        return {**self.config, "min.insync.replicas": str(min_insync(cluster.replication_factor))}


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as the broker reports it."""

    name: str
    partitions: int
    replication_factor: int  # the fewest replicas of any partition
    configs: Mapping[str, str]

    def config(self, key: str) -> str | None:
        """The effective value: reported, else Kafka's default, else None (unknown)."""
        return self.configs.get(key, KAFKA_DEFAULTS.get(key))


@dataclass(frozen=True, slots=True)
class CreateReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)  # found: checked, never recreated

    def to_dict(self) -> dict[str, list[str]]:
        return {"created": self.created, "existing": self.existing}


def min_insync(replication_factor: int) -> int:
    """A majority of the replicas: acknowledged writes survive losing a minority."""
    return replication_factor // 2 + 1


# -- the spec file --------------------------------------------------------------


def load_specs(path: Path | None = None) -> tuple[TopicSpec, ...]:
    """Read and validate the topic specs; refs first. Raises ValueError on an unsafe file."""
    path = path or topics_dir() / SPEC_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(document, dict) or set(document) != {"topics"}:
        raise ValueError(f'{path}: expected an object with exactly one key, "topics"')
    entries = document["topics"]
    if not isinstance(entries, list):
        raise ValueError(f'{path}: "topics" must be a list')
    specs = [_spec(path, entry) for entry in entries]
    roles = sorted(spec.role for spec in specs)
    if roles != sorted(ROLES):
        raise ValueError(f"{path}: expected one topic per role {list(ROLES)}, got {roles}")
    return tuple(sorted(specs, key=lambda spec: ROLES.index(spec.role)))


def _spec(path: Path, entry: object) -> TopicSpec:
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: every topic must be an object")
    unknown = set(entry) - {"role", "suffix", "config", "description"}
    if unknown:
        raise ValueError(
            f"{path}: unknown keys {sorted(unknown)} (partitions and replication come "
            "from the cluster configuration, not the file)"
        )
    role, suffix = entry.get("role"), entry.get("suffix")
    description, config = entry.get("description", ""), entry.get("config")
    if role not in ROLES:
        raise ValueError(f"{path}: role must be one of {list(ROLES)}, got {role!r}")
    where = f"{path}: topic {role}"
    if suffix != role:
        raise ValueError(f"{where}: suffix must be {role!r} (the name every node derives)")
    if not isinstance(description, str):
        raise ValueError(f"{where}: description must be a string")
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ValueError(f"{where}: config must map config names to string values")
    _validate_config(where, config)
    return TopicSpec(role=role, suffix=suffix, config=dict(config), description=description)


def _validate_config(where: str, config: Mapping[str, str]) -> None:
    if config.get("cleanup.policy") != "compact":
        raise ValueError(
            f'{where}: cleanup.policy must be exactly "compact" (got '
            f"{config.get('cleanup.policy')!r}): any delete policy expires the table"
        )
    for key in ("retention.ms", "retention.bytes"):
        if key in config and config[key] != "-1":
            raise ValueError(f'{where}: {key} must be "-1" (no finite retention of a table)')
    _check_durable(config, where, "writes")


def load_event_spec(path: Path | None = None) -> TopicSpec:
    """Read and validate the events topic's spec (a log: ``delete``, finite retention)."""
    path = path or topics_dir() / EVENTS_SPEC_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    entries = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise ValueError(f'{path}: expected {{"topics": [one topic]}}')
    entry = entries[0]
    if entry.get("role") != EVENTS or entry.get("suffix") != EVENTS:
        raise ValueError(f'{path}: the topic\'s role and suffix must be "{EVENTS}"')
    unknown = set(entry) - {"role", "suffix", "config", "description"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    config, description = entry.get("config"), entry.get("description", "")
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ValueError(f"{path}: config must map config names to string values")
    if not isinstance(description, str):
        raise ValueError(f"{path}: description must be a string")
    _validate_event_config(f"{path}: topic {EVENTS}", config)
    return TopicSpec(EVENTS, EVENTS, dict(config), description)


def _validate_event_config(where: str, config: Mapping[str, str]) -> None:
    if config.get("cleanup.policy") != "delete":
        raise ValueError(
            f'{where}: cleanup.policy must be exactly "delete" (got '
            f"{config.get('cleanup.policy')!r}): compaction keeps one event per catalog"
        )
    retention = config.get("retention.ms", "")
    if not (retention == "-1" or (retention.isdigit() and int(retention) > 0)):
        raise ValueError(f'{where}: retention.ms must be a positive number of ms or "-1"')
    _check_durable(config, where, "events")


def _check_durable(config: Mapping[str, str], where: str, lost: str) -> None:
    """What every topic spec must hold whatever its policy: no unclean leader election
    (it loses acknowledged ``lost``), no setting the replication factor derives, and
    messages large enough for the biggest record."""
    if config.get("unclean.leader.election.enable", "false") != "false":
        raise ValueError(f"{where}: unclean.leader.election.enable loses acknowledged {lost}")
    for key in _DERIVED:
        if key in config:
            raise ValueError(f"{where}: {key} is derived from the replication factor")
    size = config.get("max.message.bytes")
    if size is None or not size.isdigit() or int(size) < MIN_MESSAGE_BYTES:
        raise ValueError(f"{where}: max.message.bytes must be at least {MIN_MESSAGE_BYTES}")


def specs_for(config: ClusterConfig) -> tuple[TopicSpec, ...]:
    """The topics ``config`` needs: the changelog's, and the events topic if it publishes."""
    specs = load_specs()
    return (*specs, load_event_spec()) if config.publish_events else specs


# -- the broker -----------------------------------------------------------------


def create(
    config: ClusterConfig,
    *,
    specs: Iterable[TopicSpec] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> CreateReport:
    """Create the missing topics; existing ones are left alone (``check`` judges them).

    Returns once every topic shows in the broker's metadata.
    """
    specs = tuple(specs) if specs is not None else specs_for(config)
    admin = _admin(config)
    new = [
        NewTopic(
            spec.name(config),
            num_partitions=config.partitions,
            replication_factor=config.replication_factor,
            config=spec.configs_for(config),
        )
        for spec in specs
    ]
    futures = _call(
        "create topics",
        lambda: admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout),
    )
    report = CreateReport()
    for name, future in futures.items():
        try:
            _result(f"create topic {name}", future, timeout)
        except TopicsError as exc:
            if exc.kafka_code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            report.existing.append(name)
        else:
            report.created.append(name)
    _wait_listed(admin, [spec.name(config) for spec in specs], timeout)
    return report


def describe(config: ClusterConfig, *, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The topics as the broker reports them (JSON-ready); a missing topic has ``exists: false``."""
    specs = specs_for(config)
    states = _observe(config, specs, timeout)
    topics: dict[str, Any] = {}
    for spec in specs:
        state = states[spec.role]
        topics[spec.name(config)] = (
            {"role": spec.role, "exists": False}
            if state is None
            else {
                "role": spec.role,
                "exists": True,
                "partitions": state.partitions,
                "replication_factor": state.replication_factor,
                "configs": dict(sorted(state.configs.items())),
            }
        )
    return {
        "bootstrap": config.bootstrap,
        "prefix": config.prefix,
        "expected": {
            "partitions": config.partitions,
            "replication_factor": config.replication_factor,
        },
        "topics": topics,
    }


def check(config: ClusterConfig, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Every problem with the topics, each with its fix; empty when safe. Creates nothing."""
    specs = specs_for(config)
    states = _observe(config, specs, timeout)
    problems: list[str] = []
    for spec in specs:
        state = states[spec.role]
        if state is None:
            problems.append(
                f"topic {spec.name(config)} ({spec.role} table) is missing: run "
                f"`metastore topics create --kafka {config.bootstrap} --prefix {config.prefix} "
                f"--partitions {config.partitions} "
                f"--replication-factor {config.replication_factor}`"
            )
        else:
            problems.extend(_problems(config, state, spec))
    refs, objects = states["refs"], states["objects"]
    if refs is not None and objects is not None and refs.partitions != objects.partitions:
        problems.append(
            f"{refs.name} has {refs.partitions} partitions but {objects.name} has "
            f"{objects.partitions}: a catalog must live in the same partition of both; "
            "recreate the wrong one (only while it is empty)"
        )
    return problems


def ensure_safe(config: ClusterConfig, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """A node's startup gate: raises UnsafeTopics (or TopicsError if the broker cannot be asked)."""
    problems = check(config, timeout=timeout)
    if problems:
        raise UnsafeTopics(config, problems)


def _problems(config: ClusterConfig, state: TopicState, spec: TopicSpec) -> list[str]:
    name, problems = state.name, []
    alter = (
        f"kafka-configs --bootstrap-server {config.bootstrap} --alter --entity-type topics "
        f"--entity-name {name} --add-config"
    )
    if state.partitions != config.partitions:
        problems.append(
            f"topic {name} has {state.partitions} partitions, the cluster is configured for "
            f"{config.partitions} (a catalog's partition is a hash mod the count, so it cannot "
            "change under data): if the topic was auto-created by the broker and is empty, "
            f"delete it (`kafka-topics --bootstrap-server {config.bootstrap} --delete --topic "
            f"{name}`) and run `metastore topics create`; otherwise run with "
            f"--partitions {state.partitions}"
        )
    policy = state.configs.get("cleanup.policy")
    if spec.role == EVENTS:
        if policy not in ("delete", None):  # unset: Kafka's default, delete
            problems.append(
                f"topic {name} has cleanup.policy={policy}, which keeps only the newest event "
                f"of each catalog: `{alter} cleanup.policy=delete`"
            )
    elif policy != "compact":
        shown = (
            f"cleanup.policy={policy}"
            if policy is not None
            else "no cleanup.policy (the broker default, delete)"
        )
        problems.append(
            f"topic {name} has {shown}, which expires table records: "
            f"`{alter} cleanup.policy=compact`"
        )
    if state.replication_factor < config.replication_factor:
        problems.append(
            f"topic {name} has replication factor {state.replication_factor}, asked for "
            f"{config.replication_factor}: add replicas with kafka-reassign-partitions, or run "
            f"with --replication-factor {state.replication_factor}"
        )
    needed = min(min_insync(config.replication_factor), state.replication_factor)
    insync = state.config("min.insync.replicas")
    if insync is None or not insync.isdigit() or int(insync) > state.replication_factor:
        problems.append(
            f"topic {name} has min.insync.replicas={insync} with {state.replication_factor} "
            f"replicas, so writes fail: `{alter} min.insync.replicas={needed}`"
        )
    elif int(insync) < needed:
        problems.append(
            f"topic {name} has min.insync.replicas={insync}, so one broker can acknowledge a "
            f"write alone and lose it: `{alter} min.insync.replicas={needed}`"
        )
    size = state.config("max.message.bytes")
    if size is None or not size.isdigit() or int(size) < MIN_MESSAGE_BYTES:
        problems.append(
            f"topic {name} has max.message.bytes={size}, too small for a "
            f"{DEFAULT_MAX_OBJECT_BYTES}-byte object: `{alter} max.message.bytes=2097152`"
        )
    if state.config("unclean.leader.election.enable") == "true":
        problems.append(
            f"topic {name} allows unclean leader election, which loses acknowledged writes: "
            f"`{alter} unclean.leader.election.enable=false`"
        )
    return problems


def _observe(
    config: ClusterConfig, specs: Iterable[TopicSpec], timeout: float
) -> dict[TopicRole, TopicState | None]:
    admin = _admin(config)
    # A full listing names no topic, so no broker auto-creates one to answer it.
    metadata = _call("list topics", lambda: admin.list_topics(timeout=timeout))
    found: dict[TopicRole, Any] = {}
    for spec in specs:
        topic = metadata.topics.get(spec.name(config))
        if topic is not None and topic.error is not None:
            if topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicsError(f"metadata of {topic.topic}: {topic.error.str()}")
            topic = None
        found[spec.role] = topic
    resources = {
        role: ConfigResource(ResourceType.TOPIC, topic.topic)
        for role, topic in found.items()
        if topic is not None
    }
    configs: dict[TopicRole, dict[str, str]] = {}
    if resources:
        futures = _call(
            "describe topic configs",
            lambda: admin.describe_configs(list(resources.values()), request_timeout=timeout),
        )
        by_name = {resource.name: future for resource, future in futures.items()}
        for role, resource in resources.items():
            entries = _result(
                f"describe configs of {resource.name}", by_name[resource.name], timeout
            )
            configs[role] = {
                key: entry.value for key, entry in entries.items() if entry.value is not None
            }
    states: dict[TopicRole, TopicState | None] = {}
    for spec in specs:
        topic = found[spec.role]
        states[spec.role] = (
            None
            if topic is None
            else TopicState(
                name=topic.topic,
                partitions=len(topic.partitions),
                replication_factor=min(
                    (len(p.replicas) for p in topic.partitions.values()), default=0
                ),
                configs=configs.get(spec.role, {}),
            )
        )
    return states


def _wait_listed(admin: AdminClient, names: list[str], timeout: float) -> None:
    """Topic creation propagates to every broker's metadata asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = _call("list topics", lambda: admin.list_topics(timeout=timeout))
        ready = all(
            (topic := metadata.topics.get(name)) is not None
            and topic.error is None
            and topic.partitions
            for name in names
        )
        if ready:
            return
        if time.monotonic() >= deadline:
            raise TopicsError(f"topics {names} not in the broker's metadata after {timeout}s")
        time.sleep(0.1)


def _admin(config: ClusterConfig) -> AdminClient:
    # Every failure reaches the caller as a TopicsError, including Kafka properties
    # librdkafka refuses (a security setting it does not know, a missing CA file).
    return _call("configure the Kafka client", lambda: AdminClient(config.admin()))


def _call(what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except KafkaException as exc:
        raise _error(what, exc) from exc


def _result(what: str, future: Future[Any], timeout: float) -> Any:
    try:
        return future.result(timeout=timeout)
    except KafkaException as exc:
        raise _error(what, exc) from exc
    except TimeoutError as exc:
        raise TopicsError(f"{what}: no answer from the broker within {timeout}s") from exc


def _error(what: str, exc: KafkaException) -> TopicsError:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        failure = TopicsError(f"{what}: {error.str()} ({error.name()})")
        failure.kafka_code = error.code()
        return failure
    return TopicsError(f"{what}: {exc}")
