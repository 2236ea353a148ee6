"""Every node's read-only materialized view of the changelog topics (KLIP-18).

``ViewStore`` is the RocksDB state and the rules that apply records to it,
``ViewConsumer`` the thread that feeds it from Kafka, ``digest`` a fingerprint
that shows two views of the same log are equal.
"""

from metastore.cluster.view.consumer import ConsumerStats, ViewConsumer, open_consumer
from metastore.cluster.view.digest import digest
from metastore.cluster.view.model import (
    ApplyResult,
    Message,
    PartitionBarrier,
    ReadOnlyView,
    Role,
    ViewError,
)
from metastore.cluster.view.store import ViewStore

__all__ = [
    "ApplyResult",
    "ConsumerStats",
    "Message",
    "PartitionBarrier",
    "ReadOnlyView",
    "Role",
    "ViewConsumer",
    "ViewError",
    "ViewStore",
    "digest",
    "open_consumer",
]
