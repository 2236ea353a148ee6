"""Every node's read-only materialized view of the changelog topics (KLIP-18).

``rules.apply_records`` is what a record does (a pure function of a ``ViewState``
and records), ``ViewStore`` the RocksDB that holds the result, ``ViewConsumer``
the thread that feeds it from Kafka, ``digest`` a fingerprint that shows two
views of the same log are equal.
"""

from metastore.cluster.view.apply_rules import Applied, ApplyContext, Drop, apply_records
from metastore.cluster.view.consumer import ConsumerStats, ViewConsumer, open_consumer
from metastore.cluster.view.digest import digest, fingerprint
from metastore.cluster.view.view_model import ApplyResult, Message, ReadOnlyView, ViewError
from metastore.cluster.view.view_state import Held, PartitionBarrier, ViewState, decode_state
from metastore.cluster.view.view_store import ViewStore

__all__ = [
    "Applied",
    "ApplyContext",
    "ApplyResult",
    "ConsumerStats",
    "Drop",
    "Held",
    "Message",
    "PartitionBarrier",
    "ReadOnlyView",
    "ViewConsumer",
    "ViewError",
    "ViewState",
    "ViewStore",
    "apply_records",
    "decode_state",
    "digest",
    "fingerprint",
    "open_consumer",
]
