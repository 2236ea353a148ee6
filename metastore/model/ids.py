"""64-bit snowflake IDs: epoch 2025-01-01, 41-bit ms, 10-bit node, 12-bit seq.

IDs must be unique across nodes without coordination on the hot path, so each
process leases a node ID (``metastore.engine.leases``) and generates locally. IDs are
monotonic per generator even when the wall clock steps back: the generator keeps
using its last timestamp and borrows the next millisecond when a millisecond's
4,096 sequence numbers run out. The first 1,000 timestamps are reserved for
system objects (``system_id``) and never produced by ``next_id``.

A node's generator mints only while its lease holds (``bind``): past the end it was
given it refuses with 503 and mints nothing, because after that moment another node
may lease the same node ID. A lease that is renewed, or a node ID leased anew after a
loss, binds it again.
"""

from __future__ import annotations

import threading

from metastore.errors import ServiceUnavailable
from metastore.util.clock import Clock

EPOCH_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
TIMESTAMP_BITS = 41
NODE_BITS = 10
SEQUENCE_BITS = 12
MAX_NODE_ID = (1 << NODE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_TIMESTAMP = (1 << TIMESTAMP_BITS) - 1
RESERVED_TIMESTAMPS = 1000


def compose(timestamp_ms: int, node_id: int, sequence: int) -> int:
    if not 0 <= timestamp_ms <= MAX_TIMESTAMP:
        raise ValueError(f"timestamp out of range: {timestamp_ms}")
    if not 0 <= node_id <= MAX_NODE_ID:
        raise ValueError(f"node id out of range: {node_id}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence out of range: {sequence}")
    return (timestamp_ms << (NODE_BITS + SEQUENCE_BITS)) | (node_id << SEQUENCE_BITS) | sequence


def decompose(snowflake: int) -> tuple[int, int, int]:
    """(timestamp_ms since epoch, node id, sequence)."""
    return (
        snowflake >> (NODE_BITS + SEQUENCE_BITS),
        (snowflake >> SEQUENCE_BITS) & MAX_NODE_ID,
        snowflake & MAX_SEQUENCE,
    )


def system_id(slot: int, sequence: int = 0) -> int:
    """An ID in the reserved range (timestamp < 1000), e.g. one per node-lease slot."""
    timestamp, rest = divmod(slot, MAX_NODE_ID + 1)
    if timestamp >= RESERVED_TIMESTAMPS:
        raise ValueError(f"system slot out of range: {slot}")
    return compose(timestamp, rest, sequence)


def _check_node_id(node_id: int) -> None:
    if not 0 <= node_id <= MAX_NODE_ID:
        raise ValueError(f"node id out of range: {node_id}")


def timestamp_us(snowflake: int) -> int:
    """Wall-clock microseconds at which a generated ID was minted."""
    return EPOCH_US + decompose(snowflake)[0] * 1000


class LeaseRunOut(ServiceUnavailable):
    """The generator's node ID is not (or no longer) leased to this node: nothing is
    minted until it is leased again."""


class SnowflakeGenerator:
    """Thread-safe generator for one leased node ID."""

    def __init__(self, node_id: int, clock: Clock, until_us: int | None = None) -> None:
        """``until_us``: the wall-clock microsecond from which it refuses to mint (None:
        never; a tool that holds its node ID for good)."""
        _check_node_id(node_id)
        self._node_id = node_id
        self._until_us = until_us
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ms = RESERVED_TIMESTAMPS - 1
        self._sequence = MAX_SEQUENCE

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def until_us(self) -> int | None:
        return self._until_us

    def bind(self, node_id: int | None, until_us: int = 0) -> None:
        """Mint with ``node_id`` until ``until_us``; None: mint nothing (a lease lost).
        The timestamp and sequence carry on: a new node ID was free when it was leased,
        so its earlier holder minted nothing at or after this generator's next ID."""
        if node_id is not None:
            _check_node_id(node_id)
        with self._lock:
            if node_id is None:
                self._until_us = 0
            else:
                self._node_id, self._until_us = node_id, until_us

    def next_id(self) -> int:
        with self._lock:
            now_us = self._clock.now_us()
            if self._until_us is not None and now_us >= self._until_us:
                raise LeaseRunOut(
                    "this node's node-id lease has run out (it could not be renewed in "
                    "time, or was lost); nothing was written, retry later"
                )
            now_ms = max((now_us - EPOCH_US) // 1000, RESERVED_TIMESTAMPS)
            if now_ms > self._last_ms:
                self._last_ms = now_ms
                self._sequence = 0
            elif self._sequence < MAX_SEQUENCE:
                # Same millisecond, or the wall clock stepped back: keep counting.
                self._sequence += 1
            else:
                # Sequence exhausted: borrow the next millisecond rather than block.
                self._last_ms += 1
                self._sequence = 0
            return compose(self._last_ms, self._node_id, self._sequence)
