"""Snowflake node-id leases: CAS on updateable objects, driven by a manual clock."""

from __future__ import annotations

import random

import pytest

from metastore.clock import ManualClock
from metastore.codec import default_codec
from metastore.errors import CommitStateUnknown, MetastoreError, ServiceUnavailable
from metastore.ids import MAX_NODE_ID
from metastore.keys import ObjKey
from metastore.leases import NodeLeaser, lease_key
from metastore.persistence.base import UpdateableObject
from metastore.persistence.memory import MemoryPersistence

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
