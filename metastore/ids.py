"""64-bit snowflake IDs: epoch 2025-01-01, 41-bit ms, 10-bit node, 12-bit seq.

IDs must be unique across nodes without coordination on the hot path, so each
process leases a node ID (``metastore.leases``) and generates locally. IDs are
monotonic per generator even when the wall clock steps back: the generator keeps
using its last timestamp and borrows the next millisecond when a millisecond's
4,096 sequence numbers run out. The first 1,000 timestamps are reserved for
system objects (``system_id``) and never produced by ``next_id``.
"""

from __future__ import annotations

import threading

from metastore.clock import Clock

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


def timestamp_us(snowflake: int) -> int:
    """Wall-clock microseconds at which a generated ID was minted."""
    return EPOCH_US + decompose(snowflake)[0] * 1000


class SnowflakeGenerator:
    """Thread-safe generator for one leased node ID."""

    def __init__(self, node_id: int, clock: Clock) -> None:
        if not 0 <= node_id <= MAX_NODE_ID:
            raise ValueError(f"node id out of range: {node_id}")
        self._node_id = node_id
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ms = RESERVED_TIMESTAMPS - 1
        self._sequence = MAX_SEQUENCE

    @property
    def node_id(self) -> int:
        return self._node_id

    def next_id(self) -> int:
        with self._lock:
            now_ms = max((self._clock.now_us() - EPOCH_US) // 1000, RESERVED_TIMESTAMPS)
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
