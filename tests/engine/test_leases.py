"""Snowflake node-id leases: CAS on updateable objects, driven by a manual clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from metastore.engine.lease_keeper import LeaseKeeper
from metastore.engine.leases import Lease, NodeLeaser, lease_key
from metastore.errors import CommitStateUnknown, MetastoreError, ServiceUnavailable
from metastore.model.codec import default_codec
from metastore.model.ids import MAX_NODE_ID, LeaseRunOut, SnowflakeGenerator, decompose
from metastore.model.keys import ObjKey
from metastore.persistence.base import UpdateableObject
from metastore.persistence.memory import MemoryPersistence
from metastore.util.clock import ManualClock

LEASE_S = 60.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> MemoryPersistence:
    return MemoryPersistence()


def leaser(store: MemoryPersistence, clock: ManualClock, holder: str, seed: int = 0) -> NodeLeaser:
    return NodeLeaser(store, default_codec(), clock, holder, LEASE_S, random.Random(seed))


def stored(store: MemoryPersistence, node_id: int) -> dict[str, object] | None:
    obj = store.get_updateable(lease_key(node_id))
    return None if obj is None else default_codec().decode("node_lease", obj.data)


def test_acquire_records_the_lease(store: MemoryPersistence, clock: ManualClock) -> None:
    first = leaser(store, clock, "node-a")
    lease = first.acquire()
    assert 0 <= lease.node_id <= MAX_NODE_ID
    assert first.lease == lease
    assert lease.leased_until_us == clock.now_us() + int(LEASE_S * 1_000_000)
    assert stored(store, lease.node_id) == {
        "node_id": lease.node_id,
        "holder": "node-a",
        "leased_until_us": lease.leased_until_us,
    }
    assert store.get_updateable(lease_key(lease.node_id)).token == lease.token  # type: ignore[union-attr]
    assert first.renew_interval_s == pytest.approx(LEASE_S / 3)


def test_live_leases_are_never_shared(store: MemoryPersistence, clock: ManualClock) -> None:
    # The same seed makes every leaser try the same ids in the same order: the worst case.
    leasers = [leaser(store, clock, f"node-{i}", seed=42) for i in range(50)]
    ids = [one.acquire().node_id for one in leasers]
    assert len(set(ids)) == 50
    rng = random.Random(7)
    more = [leaser(store, clock, f"other-{i}", seed=rng.randrange(10**6)) for i in range(50)]
    more_ids = [one.acquire().node_id for one in more]
    assert len(set(ids) | set(more_ids)) == 100


def test_renew_extends_the_lease(store: MemoryPersistence, clock: ManualClock) -> None:
    first = leaser(store, clock, "node-a")
    lease = first.acquire()
    clock.advance(LEASE_S / 3)
    assert first.renew() is True
    assert first.lease is not None
    assert first.lease.node_id == lease.node_id
    assert first.lease.leased_until_us == clock.now_us() + int(LEASE_S * 1_000_000)
    assert first.lease.leased_until_us > lease.leased_until_us
    assert first.lease.token != lease.token
    # Past the ORIGINAL expiry but inside the renewed one: still not up for grabs.
    clock.advance(LEASE_S * 0.9)
    assert leaser(store, clock, "node-b", seed=0).acquire().node_id != lease.node_id


def test_expired_lease_is_taken_over_and_the_old_holder_loses_it(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    first = leaser(store, clock, "node-a", seed=3)
    lease = first.acquire()
    assert leaser(store, clock, "node-b", seed=3).acquire().node_id != lease.node_id
    clock.advance(LEASE_S + 1)
    third = leaser(store, clock, "node-c", seed=3)  # same order: tries the same id first
    assert third.acquire().node_id == lease.node_id
    assert stored(store, lease.node_id)["holder"] == "node-c"  # type: ignore[index]
    assert first.renew() is False
    assert first.lease is None
    assert stored(store, lease.node_id)["holder"] == "node-c"  # type: ignore[index]
    first.release()  # nothing to release any more: must not free node-c's lease
    assert stored(store, lease.node_id)["holder"] == "node-c"  # type: ignore[index]
    assert third.renew() is True


def test_release_frees_the_id_at_once(store: MemoryPersistence, clock: ManualClock) -> None:
    first = leaser(store, clock, "node-a", seed=5)
    lease = first.acquire()
    first.release()
    assert first.lease is None
    assert store.get_updateable(lease_key(lease.node_id)) is None
    assert first.renew() is False
    assert leaser(store, clock, "node-b", seed=5).acquire().node_id == lease.node_id


def test_released_by_a_stale_holder_does_not_free_the_new_lease(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    first = leaser(store, clock, "node-a", seed=9)
    lease = first.acquire()
    clock.advance(LEASE_S + 1)
    second = leaser(store, clock, "node-b", seed=9)
    assert second.acquire().node_id == lease.node_id
    first.release()  # still believes it holds the lease: the CAS on its token must fail
    assert first.lease is None
    assert stored(store, lease.node_id)["holder"] == "node-b"  # type: ignore[index]


def test_no_free_id_is_service_unavailable(store: MemoryPersistence, clock: ManualClock) -> None:
    until = clock.now_us() + 10_000_000
    for node_id in range(MAX_NODE_ID + 1):
        record = {"node_id": node_id, "holder": f"n{node_id}", "leased_until_us": until}
        data = default_codec().encode("node_lease", record)
        key = lease_key(node_id)
        assert store.cas_updateable(key, None, UpdateableObject(key, data, f"tok{node_id}"))
    with pytest.raises(ServiceUnavailable):
        leaser(store, clock, "late").acquire()
    clock.advance(11)
    assert leaser(store, clock, "late").acquire() is not None


class UnsettledCas(MemoryPersistence):
    """The memory backend plus one faulty CAS: it raises ``error``, after applying the
    swap or not, and the swap may stay out of sight for a number of reads (a view that
    has not applied it yet)."""

    def __init__(self) -> None:
        super().__init__()
        self.error: MetastoreError | None = None
        self.applied = False
        self.hidden_reads = 0
        self._before: UpdateableObject | None = None

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        error, self.error = self.error, None
        if error is None:
            return super().cas_updateable(key, expected_token, new)
        if self.applied:
            self._before = super().get_updateable(key)
            assert super().cas_updateable(key, expected_token, new)
        raise error

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        if self.hidden_reads > 0:
            self.hidden_reads -= 1
            return self._before
        return super().get_updateable(key)


@pytest.fixture
def faulty() -> UnsettledCas:
    return UnsettledCas()


def test_a_renewal_nobody_answered_is_retried_while_the_lease_holds(
    faulty: UnsettledCas, clock: ManualClock
) -> None:
    first = leaser(faulty, clock, "node-a")
    lease = first.acquire()
    clock.advance(LEASE_S / 3)
    faulty.error = ServiceUnavailable("no owner of partition 0 answered")
    assert first.renew() is True  # not renewed, still held
    assert first.lease == lease
    clock.advance(LEASE_S / 3)
    assert first.renew() is True  # renewed this time
    assert first.lease is not None and first.lease.token != lease.token
    renewed = first.lease
    clock.advance(LEASE_S / 3)
    faulty.error = ServiceUnavailable("no owner of partition 0 answered")
    assert first.renew() is True
    clock.advance(LEASE_S * 2 / 3 + 1)  # expired without a renewal: lost
    faulty.error = ServiceUnavailable("no owner of partition 0 answered")
    assert first.renew() is False
    assert first.lease is None
    assert stored(faulty, renewed.node_id)["holder"] == "node-a"  # type: ignore[index]


def test_a_renewal_with_an_unknown_outcome_is_read_back(
    faulty: UnsettledCas, clock: ManualClock
) -> None:
    first = leaser(faulty, clock, "node-a")
    lease = first.acquire()
    clock.advance(LEASE_S / 3)
    faulty.error, faulty.applied = CommitStateUnknown("commit state unknown"), True
    assert first.renew() is True
    current = faulty.get_updateable(lease_key(lease.node_id))
    assert first.lease is not None and current is not None
    assert first.lease.token == current.token != lease.token  # it had swapped: adopted
    clock.advance(LEASE_S / 3)
    assert first.renew() is True


def test_a_renewal_that_reaches_the_view_late_still_holds(
    faulty: UnsettledCas, clock: ManualClock
) -> None:
    first = leaser(faulty, clock, "node-a")
    lease = first.acquire()
    clock.advance(LEASE_S / 3)
    faulty.error, faulty.applied = CommitStateUnknown("commit state unknown"), True
    faulty.hidden_reads = 1  # the read-back still sees the old token
    assert first.renew() is True
    assert first.lease == lease
    clock.advance(LEASE_S / 3)
    assert first.renew() is True  # the unknown renewal had happened: its token is used
    assert first.lease is not None and first.lease.token != lease.token
    assert stored(faulty, lease.node_id)["leased_until_us"] == first.lease.leased_until_us  # type: ignore[index]


# --- minting only while the lease holds, and leasing again -----------------------------


def test_writes_stop_a_sixth_of_the_lease_before_its_end(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    first = leaser(store, clock, "node-a")
    lease = first.acquire()
    margin = int(LEASE_S * 1_000_000) // 6  # another node's clock may run ahead by this much
    assert first.writes_until_us() == lease.leased_until_us - margin
    assert first.writes_for_s() == LEASE_S * 5 / 6
    clock.set_us(first.writes_until_us() - 1)
    assert first.holds()
    clock.set_us(first.writes_until_us())
    assert not first.holds()
    assert first.renew() is True  # nobody took it over: renewed, and it holds again
    assert first.holds()
    assert first.writes_until_us() == clock.now_us() + int(LEASE_S * 1_000_000) - margin


def test_listeners_hear_every_lease_held_renewed_and_lost(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    first = leaser(store, clock, "node-a", seed=3)
    heard: list[Lease | None] = []
    first.on_change(heard.append)
    lease = first.acquire()
    clock.advance(LEASE_S / 3)
    assert first.renew() is True
    assert heard == [lease, first.lease]
    clock.advance(LEASE_S + 1)
    assert leaser(store, clock, "node-b", seed=3).acquire().node_id == lease.node_id
    assert first.lost == 0
    assert first.renew() is False
    assert heard[-1] is None and not first.holds()
    assert first.lost == 1 and first.writes_for_s() == 0
    again = first.acquire()  # a node id leased again, another one
    assert again.node_id != lease.node_id and heard[-1] == again and first.holds()
    first.release()
    assert heard[-1] is None and len(heard) == 5


class Unreachable(MemoryPersistence):
    """The memory backend whose lease writes fail while ``down``: no owner answers."""

    down = False

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        if self.down:
            raise ServiceUnavailable("no owner of partition 0 answered")
        return super().cas_updateable(key, expected_token, new)


def keeping(store: MemoryPersistence, clock: ManualClock, lease_s: float = LEASE_S) -> Keeping:
    one = NodeLeaser(store, default_codec(), clock, "node-a", lease_s, random.Random(3))
    one.acquire()
    ids = SnowflakeGenerator(0, clock)
    one.mint_with(ids)  # as a node's does
    return Keeping(one, LeaseKeeper(one, ThreadPoolExecutor(1)), ids)


@dataclass
class Keeping:
    leaser: NodeLeaser
    keeper: LeaseKeeper
    ids: SnowflakeGenerator


async def test_a_write_after_a_long_pause_renews_the_lease_at_once(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    kept = keeping(store, clock)
    lease = kept.leaser.lease
    assert lease is not None
    clock.advance(LEASE_S * 3)  # a stopped process, a suspended machine: nobody took it
    with pytest.raises(LeaseRunOut):
        kept.ids.next_id()
    assert not kept.keeper.holds()
    await kept.keeper.renew_now()
    assert kept.keeper.holds() and kept.leaser.lease is not None
    assert kept.leaser.lease.node_id == lease.node_id
    assert decompose(kept.ids.next_id())[1] == lease.node_id


async def test_a_lost_lease_is_followed_by_a_new_node_id(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    kept = keeping(store, clock)
    lease = kept.leaser.lease
    assert lease is not None
    clock.advance(LEASE_S + 1)
    assert leaser(store, clock, "node-b", seed=3).acquire().node_id == lease.node_id  # taken over
    await kept.keeper.renew_now()
    again = kept.leaser.lease
    assert again is not None and again.node_id != lease.node_id
    assert stored(store, again.node_id)["holder"] == "node-a"  # type: ignore[index]
    assert decompose(kept.ids.next_id())[1] == again.node_id


async def test_a_lease_that_cannot_be_renewed_refuses_writes_until_the_store_answers() -> None:
    store, clock = Unreachable(), ManualClock()
    kept = keeping(store, clock)
    clock.advance(LEASE_S * 5 / 6)  # the margin reached while no renewal got through
    store.down = True
    with pytest.raises(LeaseRunOut) as refused:
        await kept.keeper.renew_now()
    assert refused.value.status == 503
    with pytest.raises(LeaseRunOut):
        kept.ids.next_id()
    clock.advance(LEASE_S)  # expired meanwhile: lost, and no new lease while down
    with pytest.raises(LeaseRunOut):
        await kept.keeper.renew_now()
    assert kept.leaser.lease is None
    store.down = False
    await kept.keeper.renew_now()
    assert kept.keeper.holds()
    kept.ids.next_id()


async def test_the_keeper_leases_again_on_its_own_after_a_loss(
    store: MemoryPersistence, clock: ManualClock
) -> None:
    kept = keeping(store, clock, lease_s=0.3)  # renewals every 0.1 s of real time
    lease = kept.leaser.lease
    assert lease is not None
    clock.advance(1)
    assert leaser(store, clock, "node-b", seed=3).acquire().node_id == lease.node_id
    running = asyncio.create_task(kept.keeper.run())
    try:
        deadline = time.monotonic() + 10
        while kept.leaser.lease is None or kept.leaser.lease.node_id == lease.node_id:
            assert time.monotonic() < deadline, "no node id leased again"
            await asyncio.sleep(0.01)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert kept.keeper.holds()
