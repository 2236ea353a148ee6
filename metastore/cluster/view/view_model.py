"""The view's vocabulary: what it reads of a consumed record, its results and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from metastore.errors import MetastoreError


class ViewError(MetastoreError):
    """The view cannot go on: a record from a newer release, or another cluster's view."""


class ReadOnlyView(MetastoreError):
    """A write reached a view; in cluster mode writes go through the partition owner."""


class Message(Protocol):
    """What the apply rules read of a consumed record (``confluent_kafka.Message``)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> str | bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one ``ViewStore.apply`` did."""

    consumed: int  # records in the batch
    applied: int  # changed (or confirmed) the view
    dropped: int  # refused by a rule, counted
    waiting: int  # refs records held until their objects arrive (all partitions, after)
