"""Snowflake IDs: layout, monotonicity under clock trouble, uniqueness."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import pairwise

import pytest

from metastore.model.ids import (
    EPOCH_US,
    MAX_NODE_ID,
    MAX_SEQUENCE,
    MAX_TIMESTAMP,
    NODE_BITS,
    RESERVED_TIMESTAMPS,
    SEQUENCE_BITS,
    TIMESTAMP_BITS,
    LeaseRunOut,
    SnowflakeGenerator,
    compose,
    decompose,
    system_id,
    timestamp_us,
)
from metastore.util.clock import ManualClock, SystemClock

T0_MS = 40_000_000_000  # ~463 days after the epoch, well inside 41 bits
T0_US = EPOCH_US + T0_MS * 1000


def strictly_increasing(ids: Sequence[int]) -> bool:
    return all(a < b for a, b in pairwise(ids))


def frozen_clock(ms: int = T0_MS, extra_us: int = 0) -> ManualClock:
    return ManualClock(EPOCH_US + ms * 1000 + extra_us)


# --- layout -----------------------------------------------------------------


def test_layout_constants() -> None:
    assert (TIMESTAMP_BITS, NODE_BITS, SEQUENCE_BITS) == (41, 10, 12)
    assert int(datetime(2025, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000 == EPOCH_US
    assert EPOCH_US == 1_735_689_600_000_000
    assert (MAX_TIMESTAMP, MAX_NODE_ID, MAX_SEQUENCE) == (2**41 - 1, 1023, 4095)
    assert RESERVED_TIMESTAMPS == 1000


def test_bit_positions() -> None:
    assert compose(0, 0, 1) == 1
    assert compose(0, 0, MAX_SEQUENCE) == 0xFFF
    assert compose(0, 1, 0) == 1 << 12
    assert compose(0, MAX_NODE_ID, 0) == 0x3FF << 12
    assert compose(1, 0, 0) == 1 << 22
    assert compose(MAX_TIMESTAMP, 0, 0) == (2**41 - 1) << 22
    # Every field at its maximum fills exactly 63 bits: the ID stays a positive signed long.
    assert compose(MAX_TIMESTAMP, MAX_NODE_ID, MAX_SEQUENCE) == 2**63 - 1
    assert compose(5, 3, 7) == (5 << 22) | (3 << 12) | 7


@pytest.mark.parametrize(
    "parts",
    [
        (0, 0, 0),
        (1, 1, 1),
        (999, 1023, 4095),
        (1000, 0, 0),
        (T0_MS, 517, 42),
        (MAX_TIMESTAMP, MAX_NODE_ID, MAX_SEQUENCE),
        (MAX_TIMESTAMP, 0, 0),
        (0, MAX_NODE_ID, 0),
        (0, 0, MAX_SEQUENCE),
    ],
)
def test_compose_decompose_round_trip(parts: tuple[int, int, int]) -> None:
    snowflake = compose(*parts)
    assert decompose(snowflake) == parts
    assert 0 <= snowflake < 2**63


@pytest.mark.parametrize(
    ("timestamp", "node", "sequence", "field"),
    [
        (-1, 0, 0, "timestamp"),
        (MAX_TIMESTAMP + 1, 0, 0, "timestamp"),
        (0, -1, 0, "node id"),
        (0, MAX_NODE_ID + 1, 0, "node id"),
        (0, 0, -1, "sequence"),
        (0, 0, MAX_SEQUENCE + 1, "sequence"),
    ],
)
def test_compose_rejects_out_of_range(timestamp: int, node: int, sequence: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        compose(timestamp, node, sequence)


def test_timestamp_us_of_composed_id() -> None:
    assert timestamp_us(compose(T0_MS, 3, 9)) == T0_US
    assert timestamp_us(compose(0, 0, 0)) == EPOCH_US


# --- generator ----------------------------------------------------------------


def test_first_id_uses_clock_millisecond_node_and_sequence_zero() -> None:
    gen = SnowflakeGenerator(7, frozen_clock(extra_us=999))  # sub-ms part is truncated
    first = gen.next_id()
    assert decompose(first) == (T0_MS, 7, 0)
    assert timestamp_us(first) == T0_US
    assert decompose(gen.next_id()) == (T0_MS, 7, 1)


def test_new_millisecond_resets_sequence() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(1, clock)
    for _ in range(10):
        gen.next_id()
    clock.advance(0.001)
    assert decompose(gen.next_id()) == (T0_MS + 1, 1, 0)
    clock.advance(5)
    assert decompose(gen.next_id()) == (T0_MS + 5001, 1, 0)


def test_strictly_increasing_over_100k_calls() -> None:
    gen = SnowflakeGenerator(3, SystemClock())
    ids = [gen.next_id() for _ in range(100_000)]
    assert strictly_increasing(ids)
    assert {decompose(i)[1] for i in ids} == {3}


def test_monotonic_when_clock_steps_backwards() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(2, clock)
    before = [gen.next_id() for _ in range(5)]
    assert decompose(before[-1]) == (T0_MS, 2, 4)

    clock.set_us(T0_US - 10_000_000)  # ten seconds back
    after = [gen.next_id() for _ in range(5)]
    ids = before + after
    assert strictly_increasing(ids)
    # The generator keeps its last timestamp and counts on; it never goes back in time.
    assert [decompose(i) for i in after] == [(T0_MS, 2, s) for s in range(5, 10)]

    # Once the wall clock passes the last timestamp again, it is used as is.
    clock.set_us(T0_US + 1000)
    assert decompose(gen.next_id()) == (T0_MS + 1, 2, 0)


def test_backwards_step_with_exhausted_sequence_borrows_forward() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(2, clock)
    gen.next_id()
    clock.set_us(T0_US - 3_600_000_000)  # an hour back
    ids = [gen.next_id() for _ in range(MAX_SEQUENCE + 1)]  # sequences 1..4095, then borrow
    assert strictly_increasing(ids)
    assert decompose(ids[-2]) == (T0_MS, 2, MAX_SEQUENCE)
    assert decompose(ids[-1]) == (T0_MS + 1, 2, 0)


def test_frozen_clock_exhausts_sequence_and_borrows_next_millisecond() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(9, clock)
    per_ms = MAX_SEQUENCE + 1
    assert per_ms == 4096
    ids = [gen.next_id() for _ in range(3 * per_ms + 5)]

    assert len(set(ids)) == len(ids)
    assert strictly_increasing(ids)
    assert [decompose(i) for i in ids[:per_ms]] == [(T0_MS, 9, s) for s in range(per_ms)]
    assert decompose(ids[per_ms - 1]) == (T0_MS, 9, 4095)
    assert decompose(ids[per_ms]) == (T0_MS + 1, 9, 0)
    assert decompose(ids[2 * per_ms]) == (T0_MS + 2, 9, 0)
    assert decompose(ids[-1]) == (T0_MS + 3, 9, 4)

    # The real clock catching up with a borrowed millisecond must not reuse it.
    clock.set_us(T0_US + 2000)
    nxt = gen.next_id()
    assert nxt > ids[-1]
    assert decompose(nxt) == (T0_MS + 3, 9, 5)
    clock.set_us(T0_US + 4000)
    assert decompose(gen.next_id()) == (T0_MS + 4, 9, 0)


@pytest.mark.parametrize(
    "now_us",
    [
        0,  # the Unix epoch, 55 years before the ID epoch
        EPOCH_US - 1,
        EPOCH_US,  # timestamp 0
        EPOCH_US + 999_999,  # timestamp 999, the last reserved one
    ],
)
def test_never_emits_a_reserved_timestamp(now_us: int) -> None:
    gen = SnowflakeGenerator(4, ManualClock(now_us))
    ids = [gen.next_id() for _ in range(MAX_SEQUENCE + 10)]
    assert all(decompose(i)[0] >= RESERVED_TIMESTAMPS for i in ids)
    assert decompose(ids[0]) == (RESERVED_TIMESTAMPS, 4, 0)
    assert decompose(ids[-1]) == (RESERVED_TIMESTAMPS + 1, 4, 8)
    assert strictly_increasing(ids)
    # Every generated ID sorts above every system ID.
    assert ids[0] > system_id(RESERVED_TIMESTAMPS * (MAX_NODE_ID + 1) - 1, MAX_SEQUENCE)


def test_first_unreserved_millisecond_is_used_as_is() -> None:
    gen = SnowflakeGenerator(4, ManualClock(EPOCH_US + 1_000_000))
    assert decompose(gen.next_id()) == (1000, 4, 0)


@pytest.mark.parametrize("node_id", [0, 1, 513, MAX_NODE_ID])
def test_node_id_is_embedded(node_id: int) -> None:
    gen = SnowflakeGenerator(node_id, frozen_clock())
    assert gen.node_id == node_id
    ids = [gen.next_id() for _ in range(MAX_SEQUENCE + 3)]
    assert {decompose(i)[1] for i in ids} == {node_id}


@pytest.mark.parametrize("node_id", [-1, MAX_NODE_ID + 1, 5000])
def test_generator_rejects_bad_node_id(node_id: int) -> None:
    with pytest.raises(ValueError, match="node id out of range"):
        SnowflakeGenerator(node_id, ManualClock())


def test_generators_with_different_node_ids_never_collide() -> None:
    clock = frozen_clock()  # same clock, same millisecond: only the node id differs
    a = SnowflakeGenerator(1, clock)
    b = SnowflakeGenerator(2, clock)
    ids_a = [a.next_id() for _ in range(10_000)]
    ids_b = [b.next_id() for _ in range(10_000)]
    assert len(set(ids_a)) == 10_000
    assert len(set(ids_b)) == 10_000
    assert set(ids_a).isdisjoint(ids_b)
    # Same (timestamp, sequence) pairs, different node: proves the node bits do the work.
    assert [decompose(i)[::2] for i in ids_a] == [decompose(i)[::2] for i in ids_b]


@pytest.mark.parametrize("clock", [SystemClock(), frozen_clock()], ids=["system", "frozen"])
def test_thread_safety(clock: SystemClock | ManualClock) -> None:
    gen = SnowflakeGenerator(11, clock)
    threads_n, per_thread = 8, 5000
    results: list[list[int]] = [[] for _ in range(threads_n)]
    start = threading.Barrier(threads_n)

    def work(out: list[int]) -> None:
        start.wait()
        for _ in range(per_thread):
            out.append(gen.next_id())

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    all_ids = [i for out in results for i in out]
    assert len(all_ids) == threads_n * per_thread
    assert len(set(all_ids)) == threads_n * per_thread
    for out in results:  # each thread sees its own ids strictly increasing
        assert strictly_increasing(out)


# --- system ids -----------------------------------------------------------------


def test_system_id_layout() -> None:
    assert system_id(0) == 0
    assert decompose(system_id(5)) == (0, 5, 0)
    assert decompose(system_id(1023)) == (0, 1023, 0)
    assert decompose(system_id(1024)) == (1, 0, 0)
    assert decompose(system_id(1025, 7)) == (1, 1, 7)


def test_system_ids_stay_reserved_and_unique_per_slot() -> None:
    last_slot = RESERVED_TIMESTAMPS * (MAX_NODE_ID + 1) - 1
    slots = [*range(5000), *range(last_slot - 5000, last_slot + 1)]
    ids = [system_id(s) for s in slots]
    assert len(set(ids)) == len(slots)
    assert all(decompose(i)[0] < RESERVED_TIMESTAMPS for i in ids)
    assert decompose(system_id(last_slot)) == (RESERVED_TIMESTAMPS - 1, MAX_NODE_ID, 0)
    # Sequence numbers give a slot more ids without touching another slot's.
    per_slot = {system_id(3, seq) for seq in range(MAX_SEQUENCE + 1)}
    assert len(per_slot) == MAX_SEQUENCE + 1
    assert per_slot.isdisjoint({system_id(s) for s in range(4, 100)})


@pytest.mark.parametrize("slot", [RESERVED_TIMESTAMPS * (MAX_NODE_ID + 1), 10**9])
def test_system_id_rejects_slots_outside_the_reserved_range(slot: int) -> None:
    with pytest.raises(ValueError, match="system slot out of range"):
        system_id(slot)


def test_system_id_rejects_negative_slot() -> None:
    with pytest.raises(ValueError):
        system_id(-1)


# --- minting only under a lease ----------------------------------------------


def test_a_bounded_generator_mints_until_its_end_and_nothing_from_it() -> None:
    clock = frozen_clock()
    end = clock.now_us() + 1_000
    gen = SnowflakeGenerator(7, clock, until_us=end)
    first = gen.next_id()
    clock.set_us(end - 1)
    assert gen.next_id() > first
    clock.set_us(end)  # at the end: another node may lease node id 7 from now on
    with pytest.raises(LeaseRunOut) as refused:
        gen.next_id()
    assert refused.value.status == 503


def test_rebinding_mints_with_the_new_node_id_and_stays_increasing() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(7, clock, until_us=clock.now_us() + 10_000)
    before = [gen.next_id() for _ in range(5)]
    gen.bind(None)  # the lease was lost
    with pytest.raises(LeaseRunOut):
        gen.next_id()
    gen.bind(9, clock.now_us() + 10_000)  # a node id leased again
    assert gen.node_id == 9 and gen.until_us == clock.now_us() + 10_000
    after = [gen.next_id() for _ in range(5)]
    assert {decompose(i)[1] for i in after} == {9}
    assert strictly_increasing(before + after)
    with pytest.raises(ValueError, match="node id out of range"):
        gen.bind(MAX_NODE_ID + 1, clock.now_us() + 10_000)
    assert gen.node_id == 9


def test_an_unbounded_generator_never_refuses() -> None:
    clock = frozen_clock()
    gen = SnowflakeGenerator(3, clock)
    assert gen.until_us is None
    clock.advance(10 * 365 * 86_400)
    assert decompose(gen.next_id())[1] == 3
