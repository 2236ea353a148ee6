"""Cluster-mode settings and the confluent-kafka client configurations derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if self.replication_factor < 1:
            raise ValueError("replication_factor must be >= 1")
        if not self.prefix or any(c not in _TOPIC_CHARS for c in self.prefix):
            raise ValueError("prefix may use only A-Z a-z 0-9 . _ -")

    @property
    def refs_topic(self) -> str:
        return f"{self.prefix}.refs"

    @property
    def objects_topic(self) -> str:
        return f"{self.prefix}.objects"

    def transactional_id(self, partition: int) -> str:
        return f"{self.cluster}.{self.refs_topic}.{partition}"

    def common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "broker.address.family": "v4",
            "log_level": 3,
        }

    def consumer(self, **extra: Any) -> dict[str, Any]:
        """A reader: never auto-commits, reads committed data, never auto-creates topics."""
        conf = {
            **self.common(),
            "group.id": f"{self.cluster}.view",  # required by librdkafka even when assign()ing
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "fetch.wait.max.ms": self.fetch_wait_max_ms,
            **extra,
        }
        if conf["enable.auto.commit"]:
            raise ValueError("consumers must not auto-commit: offsets live with the state")
        return conf


_TOPIC_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
