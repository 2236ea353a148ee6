"""Cluster-mode settings and the confluent-kafka client configurations derived from them.

Every Kafka client of the node, the CLI and the benchmarks (the partition owner's
transactional producer, the view and membership consumers, the topics admin
client) gets its configuration from ``ClusterConfig.client``, so the connection
security (TLS, SASL) configured once reaches all of them. That security comes from
librdkafka properties given by the operator (``METASTORE_KAFKA_PROPERTIES``, a JSON
object, or ``METASTORE_KAFKA_PROPERTIES_FILE``, ``key=value`` lines). Properties
that would break what the cluster relies on (no auto-commit, read_committed
readers, idempotent transactional writers, our own group and broker settings) are
refused at startup, and values of secret properties never reach a log line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from metastore.cluster.kafka_log import kafka_logger
from metastore.util.setting_rules import ConfigError
from metastore.util.small_files import NotSmallFile, read_small_file

PROPERTIES_ENV = "METASTORE_KAFKA_PROPERTIES"
PROFILE_ENV = "METASTORE_BROKER_PROFILE"
# What the cluster's broker can be trusted with. ``kafka``: Apache Kafka or a broker as
# conformant (a read_committed fetch never returns an aborted record, the end offsets a
# fetch reports are true, a member leaving its group is handled). ``tansu``: the Tansu
# broker, which breaks all three; the cluster code stays correct on it by waiting for a
# quiet log before it counts as caught up and by never leaving the owners' group (a
# member is expelled after the session timeout instead).
BROKER_PROFILES = ("kafka", "tansu")
BrokerProfile = Literal["kafka", "tansu"]
PROPERTIES_FILE_ENV = "METASTORE_KAFKA_PROPERTIES_FILE"
MAX_PROPERTIES_FILE_BYTES = 1024 * 1024  # room for PEM blocks (a CA bundle) inline
# Past these a number is a typo: a replay of a billion partitions would hang building its
# assignment, and librdkafka refuses a topic past them with a traceback of its own.
MAX_PARTITIONS = 10_000  # also the nodes' (METASTORE_PARTITIONS) and the jobs' bound
MAX_REPLICATION_FACTOR = 100

# property -> why the operator may not set it (the node sets it, or it breaks a guarantee)
REFUSED_PROPERTIES: Mapping[str, str] = {
    "bootstrap.servers": "the brokers come from --kafka / METASTORE_KAFKA",
    "metadata.broker.list": "the brokers come from --kafka / METASTORE_KAFKA",
    "group.id": "the node names its own consumer groups",
    "group.instance.id": "group membership decides partition ownership",
    "group.protocol": "group membership decides partition ownership",
    "partition.assignment.strategy": "group membership decides partition ownership",
    "session.timeout.ms": "use METASTORE_SESSION_TIMEOUT_MS",
    "heartbeat.interval.ms": "derived from the session timeout",
    "max.poll.interval.ms": "derived from the session timeout",
    "enable.auto.commit": "offsets live with the view's state, never in Kafka",
    "auto.commit.enable": "offsets live with the view's state, never in Kafka",
    "enable.auto.offset.store": "offsets live with the view's state, never in Kafka",
    "auto.offset.reset": "a view reads every record from the beginning",
    "isolation.level": "readers must read committed records only",
    "allow.auto.create.topics": "topics are created only by `metastore topics create`",
    "transactional.id": "each partition owner's transactional id fences the previous owner",
    "enable.idempotence": "owners write with an idempotent transactional producer",
    "transaction.timeout.ms": "bounded by the node's own commit timeout",
    "acks": "transactions need acks=all",
    "request.required.acks": "transactions need acks=all",
    "max.in.flight.requests.per.connection": "set by the idempotent producer",
    "max.in.flight": "set by the idempotent producer",
    "enable.gapless.guarantee": "set by the idempotent producer",
    "message.max.bytes": "must hold the largest object (set by the node)",
    "logger": "librdkafka's lines go through the node's own logging",
    "log.queue": "librdkafka's lines go through the node's own logging",
}
# a property whose name contains one of these holds a secret (or may: a whole JAAS/OIDC config)
_SECRET_MARKERS = ("password", "secret", "key.pem", "sasl.oauthbearer.config", "sasl.jaas.config")
MASK = "***"
SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


def is_secret(name: str) -> bool:
    return any(marker in name.lower() for marker in _SECRET_MARKERS)


def redacted(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties as they may be logged: secret values replaced by ``***``."""
    return {k: MASK if is_secret(k) else v for k, v in sorted(properties.items())}


def parse_properties_json(text: str) -> dict[str, str]:
    """``{"security.protocol": "SASL_SSL", ...}``: strings, numbers or booleans."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(v, str | int | float | bool) for v in value.values()
    ):
        raise ConfigError(
            "kafka_properties",
            'must be a JSON object of librdkafka properties (e.g. {"security.protocol": "SSL"})',
            PROPERTIES_ENV,
        )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def parse_properties_file(path: str) -> dict[str, str]:
    """Java-properties style: ``key=value`` (or ``key: value``) lines; ``#``/``!`` comments."""
    try:
        text = read_small_file(path, MAX_PROPERTIES_FILE_BYTES).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            "kafka_properties_file", f"cannot read {path}: {exc}", PROPERTIES_FILE_ENV
        ) from None
    except NotSmallFile as exc:
        raise ConfigError("kafka_properties_file", f"{path} {exc}", PROPERTIES_FILE_ENV) from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separator = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if separator < 0:
            raise ConfigError(
                "kafka_properties_file",
                f"{path} line {number} is not key=value",
                PROPERTIES_FILE_ENV,
            )
        properties[line[:separator].strip()] = line[separator + 1 :].strip()
    return properties


def load_properties(text: str = "", path: str = "") -> dict[str, str]:
    """The operator's librdkafka properties from the JSON text or the file (not both),
    checked: a refused property raises ``ValueError`` naming it and why."""
    if text and path:
        raise ConfigError(
            "kafka_properties", f"set it or {PROPERTIES_FILE_ENV}, not both", PROPERTIES_ENV
        )
    properties = {}
    if text:
        properties = parse_properties_json(text)
    elif path:
        properties = parse_properties_file(path)
    try:
        check_properties(properties)
    except ValueError as exc:
        setting, where = (
            ("kafka_properties", PROPERTIES_ENV)
            if text
            else ("kafka_properties_file", PROPERTIES_FILE_ENV)
        )
        raise ConfigError(setting, str(exc), where) from None
    return properties


def parse_profile(text: str, setting: str = "broker_profile") -> BrokerProfile:
    """``kafka`` or ``tansu``, as the operator wrote it (any case)."""
    value = text.strip().lower()
    if value not in BROKER_PROFILES:
        raise ConfigError(
            setting,
            f"must be one of {', '.join(BROKER_PROFILES)} (the broker the cluster runs on),"
            f" not {text!r}",
            PROFILE_ENV,
        )
    return cast(BrokerProfile, value)


def profile_from_env(env: Mapping[str, str]) -> BrokerProfile:
    """What the CLI commands other than ``serve`` (topics, replay, the jobs) read."""
    return parse_profile(env.get(PROFILE_ENV, "kafka"))


def properties_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the CLI commands other than ``serve`` (topics, replay) read."""
    return load_properties(env.get(PROPERTIES_ENV, ""), env.get(PROPERTIES_FILE_ENV, ""))


def check_properties(properties: Mapping[str, str]) -> None:
    for name in sorted(properties):
        reason = REFUSED_PROPERTIES.get(name.strip().lower())
        if reason is not None:
            raise ValueError(f"Kafka property {name!r} may not be set: {reason}")
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"Kafka property name {name!r} is not valid")
    protocol = properties.get("security.protocol")
    if protocol is not None and protocol.lower() not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"Kafka property security.protocol={protocol!r} is not one of "
            f"{', '.join(p.upper() for p in SECURITY_PROTOCOLS)}"
        )
    for key in ("sasl.mechanism", "sasl.mechanisms"):
        mechanism = properties.get(key)
        if mechanism is not None and mechanism.upper() not in SASL_MECHANISMS:
            raise ValueError(
                f"Kafka property {key}={mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}"
            )


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    bootstrap: str  # host:port[,host:port]
    prefix: str = "metastore"  # topics: <prefix>.refs, <prefix>.objects
    cluster: str = "metastore"  # service id in transactional.id = <cluster>.<refs topic>.<p>
    partitions: int = 12
    replication_factor: int = 1
    session_timeout_ms: int = 6000  # group membership: crash detection ~ this + a few seconds
    fetch_wait_max_ms: int = 10  # view lag vs broker load
    transaction_timeout_s: float = 10.0  # our own bound on commit/abort (never wait forever)
    # the operator's librdkafka properties (TLS, SASL, ...): every client gets them
    kafka_properties: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    # owners also produce each commit's change events to <prefix>.events, in its transaction
    publish_events: bool = False
    broker_profile: BrokerProfile = "kafka"  # what the broker can be trusted with (above)

    def __post_init__(self) -> None:
        if self.broker_profile not in BROKER_PROFILES:
            raise ValueError(f"broker profile must be one of {', '.join(BROKER_PROFILES)}")
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be 1-{MAX_PARTITIONS}, not {self.partitions}")
        if not 1 <= self.replication_factor <= MAX_REPLICATION_FACTOR:
            raise ValueError(
                f"replication_factor must be 1-{MAX_REPLICATION_FACTOR},"
                f" not {self.replication_factor}"
            )
        if not self.prefix or any(c not in _TOPIC_CHARS for c in self.prefix):
            raise ValueError("prefix may use only A-Z a-z 0-9 . _ -")
        check_properties(self.kafka_properties)

    def __repr__(self) -> str:
        return (
            f"ClusterConfig(bootstrap={self.bootstrap!r}, prefix={self.prefix!r}, "
            f"cluster={self.cluster!r}, partitions={self.partitions}, "
            f"kafka_properties={redacted(self.kafka_properties)}, "
            f"broker_profile={self.broker_profile!r})"
        )

    def connection(self) -> str:
        """The connection settings, fit for an error line (secret values masked)."""
        shown = redacted(self.kafka_properties)
        if not shown:
            return f"brokers {self.bootstrap}, no Kafka properties set"
        return f"brokers {self.bootstrap}, Kafka properties {shown}"

    @property
    def trusts_broker(self) -> bool:
        """The broker is conformant (``broker_profile`` ``kafka``): reported ends are
        true and a member may leave its group."""
        return self.broker_profile == "kafka"

    @property
    def takeover_s(self) -> float:
        """How long a partition can be without a ready owner after its owner is gone: a
        crashed member is expelled only after the session timeout (and on a ``tansu``
        broker a stopped one too, see ``membership``), the group then rebalances (Tansu
        takes half a session), and the new owner's ``init_transactions`` may wait out the
        old owner's open transaction before its barrier goes round."""
        session_s = self.session_timeout_ms / 1000
        return 1.5 * session_s + self.transaction_timeout_s + 5.0

    @property
    def refs_topic(self) -> str:
        return f"{self.prefix}.refs"

    @property
    def objects_topic(self) -> str:
        return f"{self.prefix}.objects"

    @property
    def events_topic(self) -> str:
        return f"{self.prefix}.events"

    def topic(self, role: str) -> str:
        """The topic of a role: ``refs``, ``objects`` or ``events``."""
        return {
            "refs": self.refs_topic,
            "objects": self.objects_topic,
            "events": self.events_topic,
        }[role]

    def transactional_id(self, partition: int) -> str:
        return f"{self.cluster}.{self.refs_topic}.{partition}"

    def client(self, **settings: Any) -> dict[str, Any]:
        """The one place a Kafka client's configuration is built: the brokers, our
        defaults, the operator's properties (connection security), then the client's
        own ``settings``, which never collide with the operator's (refused above)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "broker.address.family": "v4",
            "log_level": 3,
            # its lines through the node's logging, each kind once a minute (``kafka_log``)
            "logger": kafka_logger(),
        }
        conf.update(self.kafka_properties)
        conf.update(settings)
        return conf

    def common(self) -> dict[str, Any]:
        """A client with no role-specific settings (an admin client, a test producer)."""
        return self.client()

    def admin(self) -> dict[str, Any]:
        # Every admin failure reaches the caller as an exception; librdkafka's own log
        # would repeat a connection failure twenty times a second until the timeout.
        return self.client(log_level=0)

    def producer(self, transactional_id: str) -> dict[str, Any]:
        """A partition owner's writer: idempotent and transactional (fences its predecessor)."""
        return self.client(
            **{
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "transaction.timeout.ms": int(self.transaction_timeout_s * 1000),
                # librdkafka's default (1,000,000) is below our 1 MiB object limit + envelope.
                "message.max.bytes": 2 * 1024 * 1024,
            }
        )

    def consumer(self, **extra: Any) -> dict[str, Any]:
        """A reader: never auto-commits, reads committed data, never auto-creates topics."""
        conf = self.client(
            **{
                "group.id": f"{self.cluster}.view",  # required by librdkafka even when assign()ing
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "allow.auto.create.topics": False,
                "fetch.wait.max.ms": self.fetch_wait_max_ms,
                **extra,
            }
        )
        if conf["enable.auto.commit"]:
            raise ValueError("consumers must not auto-commit: offsets live with the state")
        return conf


_TOPIC_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
