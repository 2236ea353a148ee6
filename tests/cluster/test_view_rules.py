"""The view's apply rules, one test per rule, on plain messages and a dict.

Records are encoded by the real ``RecordCodec`` as a partition owner writes them
(``view_log``); the rules run as ``apply_records``, the pure function a node's
view, ``metastore replay`` and batch jobs call. The same rules through a real
broker are in ``tests/cluster/test_view.py``.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Sequence

import pytest

from metastore.cluster.view.apply_rules import Applied, Drop, apply_records
from metastore.cluster.view.view_model import ViewError
from metastore.cluster.view.view_state import ViewState, decode_state
from metastore.model.codec import FORMAT, HEADER_LEN
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import decode_ref
from metastore.persistence.rocksdb_layout import (
    DATA_PREFIXES,
    DROPPED,
    barrier_key,
    decode_count,
    decode_floor,
    decode_object,
    decode_updateable,
    deleted_ref_key,
    floor_key,
    object_key,
    offsets_key,
    ref_key,
    updateable_key,
)
from tests.cluster.view_log import CODEC, CONTEXT, TENANT, DictView, Log, Rec, catalog_in


def head(view: DictView, log: Log, name: str = "main") -> int | None:
    key = RefKey(TENANT, log.catalog, name)
    raw = view.get(ref_key(key))
    return None if raw is None else decode_ref(CODEC, key, raw).head


def count(applied: Applied, key: bytes) -> int:
    """An offset or count the writes hold under ``key``."""
    raw = applied.writes[key]
    assert raw is not None
    return decode_count(raw)


def reasons(drops: Sequence[Drop]) -> list[str]:
    return [drop.reason for drop in drops]


def test_objects_then_their_ref_apply_with_their_offsets_in_the_same_writes() -> None:
    log, view = Log(), DictView()
    first, second = log.obj(1), log.obj(2)
    records = [*log.objects(first, second), log.ref(None, log.ref_value(2))]
    applied = view.apply(records)

    assert (applied.consumed, applied.applied, applied.dropped, applied.waiting) == (3, 3, 0, 0)
    stored = view.get(object_key(first.key))
    assert stored is not None and decode_object(first.key, stored) == first
    assert head(view, log) == 2
    # The offsets describe exactly these writes: both are in the one set of writes.
    assert count(applied, offsets_key("objects", log.partition)) == 2
    assert count(applied, offsets_key("refs", log.partition)) == 1
    assert applied.state.offset("objects", log.partition) == 2
    assert applied.state.offset("refs", log.partition) == 1


def test_a_record_that_does_not_extend_the_chain_is_dropped() -> None:
    """An aborted transaction's record (visible on some brokers) or a zombie owner's:
    it expects a HEAD the view no longer has, so it changes nothing."""
    log, view = Log(), DictView()
    view.apply([*log.objects(log.obj(1)), log.ref(None, log.ref_value(1))])
    view.apply([*log.objects(log.obj(2)), log.ref(1, log.ref_value(2, 1))])
    zombie = log.ref(1, log.ref_value(3, 1))  # also built on HEAD 1: not an extension

    applied = view.apply([zombie])

    assert applied.applied == 0
    assert reasons(applied.drops) == [f"ref {RefKey(TENANT, log.catalog, 'main')}: "
                                      "expected HEAD 1, view has 2"]  # fmt: skip
    assert head(view, log) == 2
    assert applied.state.offset("refs", log.partition) == zombie.at + 1  # read past it
    assert count(applied, DROPPED) == 1


def test_a_ref_of_an_older_epoch_is_dropped_after_a_newer_barrier() -> None:
    log, view = Log(), DictView()
    view.apply([*log.objects(log.obj(1)), log.ref(None, log.ref_value(1))])
    old_epoch = log.epoch
    refs_barrier, objects_barrier = log.barrier("owner-2")

    stale = log.ref(1, log.ref_value(2, 1), epoch=old_epoch)
    current = log.ref(1, log.ref_value(3, 1))
    applied = view.apply([refs_barrier, objects_barrier, stale, current])

    assert applied.state.epoch(log.partition) == refs_barrier.at
    assert applied.state.barrier_seen(log.partition, "owner-2") == (
        refs_barrier.at,
        objects_barrier.at,
    )
    assert reasons(applied.drops) == [
        f"ref {RefKey(TENANT, log.catalog, 'main')}: epoch {old_epoch} < {refs_barrier.at}"
    ]
    assert head(view, log) == 3
    assert view.get(barrier_key("refs", log.partition)) is not None


def test_the_first_record_of_a_ref_applies_mid_chain() -> None:
    """Compaction removes a ref's older records: a replay starts inside the chain."""
    log, view = Log(), DictView()
    applied = view.apply([*log.objects(log.obj(7)), log.ref(6, log.ref_value(7, 6))])
    assert applied.dropped == 0
    assert head(view, log) == 7


def test_a_deleted_ref_is_not_resurrected_but_can_be_created_again() -> None:
    log, view = Log(), DictView()
    view.apply([*log.objects(log.obj(1)), log.ref(None, log.ref_value(1))])
    deletion = log.ref(1, None)
    applied = view.apply([deletion])
    key = ref_key(RefKey(TENANT, log.catalog, "main"))
    assert head(view, log) is None
    marker = view.get(deleted_ref_key(key))
    assert marker is not None and decode_count(marker) == deletion.at

    late = view.apply([log.ref(1, log.ref_value(2, 1))])  # built on the deleted HEAD
    assert late.dropped == 1 and head(view, log) is None

    again = view.apply([*log.objects(log.obj(3)), log.ref(None, log.ref_value(3))])
    assert again.dropped == 0 and head(view, log) == 3
    assert deleted_ref_key(key) in again.writes and again.writes[deleted_ref_key(key)] is None
    assert applied.dropped == 0


def test_refs_wait_for_their_objects_and_apply_once_they_arrive() -> None:
    log, view = Log(), DictView()
    objects = log.objects(log.obj(1), log.obj(2))
    first = log.ref(None, log.ref_value(2))  # needs objects[p] up to offset 2
    second = log.ref(2, log.ref_value(3, 2), objects_offset=0)  # needs nothing, but is behind

    held = view.apply([first, second, objects[0]])
    assert held.waiting == 2 and held.applied == 1  # only the object
    assert held.state.waiting() == {log.partition: 2}
    assert held.state.offset("refs", log.partition) == 0
    assert held.state.refs_read(log.partition) == second.at + 1
    assert head(view, log) is None

    arrived = view.apply([objects[1]])
    assert arrived.waiting == 0 and arrived.applied == 3
    assert head(view, log) == 3
    assert arrived.state.offset("refs", log.partition) == 2
    assert arrived.state.pending == {}


def test_updateables_keep_an_epoch_floor_and_a_token_chain() -> None:
    log, view = Log(), DictView()
    lease = ObjKey(TENANT, log.catalog, "lease", 1)
    created = log.updateable(1, None, "a", epoch=3)
    stale_epoch = log.updateable(1, "a", "b", epoch=2)
    wrong_token = log.updateable(1, "zzz", "c", epoch=3)
    updated = log.updateable(1, "a", "d", epoch=4)

    applied = view.apply([created, stale_epoch, wrong_token, updated])

    assert [d.offset for d in applied.drops] == [stale_epoch.at, wrong_token.at]
    assert reasons(applied.drops) == [
        f"{lease}: epoch 2 < 3",
        f"{lease}: expected token 'zzz', view has 'a'",
    ]
    stored = view.get(updateable_key(lease))
    assert stored is not None and decode_updateable(lease, stored).token == "d"
    floor = view.get(floor_key(log.partition))
    assert floor is not None and decode_floor(floor) == 4
    assert applied.state.floor(log.partition) == 4

    deleted = view.apply([log.updateable(1, "d", None, epoch=4)])
    assert deleted.dropped == 0 and view.get(updateable_key(lease)) is None


def test_an_object_is_stored_once_and_a_gc_tombstone_removes_it() -> None:
    log, view = Log(), DictView()
    original = log.obj(1, b"first")
    changed = log.obj(1, b"other bytes")
    applied = view.apply([*log.objects(original, changed, original)])
    assert applied.applied == 2 and applied.dropped == 1
    assert reasons(applied.drops) == [f"{original.key}: stored with different bytes"]

    tombstone = log.raw("objects", b"o" + original.key.encode(), None)
    removed = view.apply([tombstone])
    assert removed.applied == 1 and view.get(object_key(original.key)) is None


def test_records_read_again_are_ignored() -> None:
    log, view = Log(), DictView()
    records = [*log.objects(log.obj(1)), log.ref(None, log.ref_value(1))]
    view.apply(records)
    before = view.state

    again = view.apply(records)

    assert (again.consumed, again.applied, again.dropped) == (2, 0, 0)
    assert again.writes == {}
    assert again.state == before


def test_malformed_records_are_dropped_and_read_past() -> None:
    log, view = Log(), DictView()
    elsewhere = log.obj(1, catalog=catalog_in(2))  # a catalog of partition 2
    records = [
        log.raw("objects", b"o" + log.obj(1).key.encode(), b"not avro"),
        log.raw("objects", b"?what", b"x"),
        *log.objects(elsewhere),
        log.raw("refs", b"r" + RefKey(TENANT, log.catalog, "main").encode(), b"garbage"),
        log.raw("refs", None, b"x"),
    ]
    applied = view.apply(records)

    assert applied.applied == 0 and applied.dropped == 5
    assert all(reason.startswith("malformed: ") for reason in reasons(applied.drops))
    assert "belongs to partition 2, not 1" in reasons(applied.drops)[2]
    assert applied.state.offset("objects", log.partition) == 3
    assert applied.state.offset("refs", log.partition) == 2
    assert applied.state.dropped == 5
    assert not [k for k in view.kv if k[:1] in DATA_PREFIXES]


def test_a_record_from_a_newer_release_stops_the_view() -> None:
    log, view = Log(), DictView()
    (good,) = log.objects(log.obj(1))
    assert good.raw_value is not None and good.raw_value[0] == FORMAT
    version = CODEC.version("changelog_object") + 1
    newer = Rec(
        good.role,
        good.part,
        good.at,
        good.raw_key,
        bytes([FORMAT]) + version.to_bytes(HEADER_LEN - 1, "big") + good.raw_value[HEADER_LEN:],
        good.raw_headers,
    )
    with pytest.raises(ViewError, match=f"changelog_object v{version} is newer"):
        view.apply([newer])
    assert view.kv == {} and view.state == ViewState()


def test_a_record_of_another_topic_is_refused() -> None:
    class Elsewhere(Rec):
        def topic(self) -> str | None:
            return "another.topic"

    empty: dict[bytes, bytes | None] = {}
    with pytest.raises(ValueError, match="not a record of this view"):
        apply_records(ViewState(), [Elsewhere("refs", 0, 0, b"k", b"v")], empty.get, CONTEXT)


def test_the_input_state_is_not_changed() -> None:
    log, view = Log(), DictView()
    view.apply([*log.objects(log.obj(1)), log.ref(None, log.ref_value(2))])  # one ref held
    refs_barrier, objects_barrier = log.barrier()
    state = view.state
    snapshot = copy.deepcopy(
        (dict(state.offsets), dict(state.barriers), dict(state.floors), dict(state.pending))
    )
    kv = dict(view.kv)

    applied = apply_records(
        state,
        [refs_barrier, objects_barrier, *log.objects(log.obj(2)), log.updateable(2, None, "t")],
        kv.get,
        CONTEXT,
    )

    assert applied.state != state
    assert (dict(state.offsets), dict(state.barriers), dict(state.floors), dict(state.pending)) == (
        snapshot
    )
    assert kv == view.kv  # the lookup is only read
    with pytest.raises(TypeError):
        state.offsets[("refs", 9)] = 1  # type: ignore[index]


def test_the_stored_keys_give_back_the_state() -> None:
    """What a restart reads (every view key the writes hold) is the state without the
    refs records that still wait: those are read again from the stored refs offset."""
    log, view = Log(), DictView()
    refs_barrier, objects_barrier = log.barrier()
    view.apply([refs_barrier, objects_barrier, log.updateable(2, None, "t", epoch=7)])
    view.apply([log.raw("objects", b"?", b"x")])
    view.apply([log.ref(None, log.ref_value(1), objects_offset=99)])  # held
    records = log.records

    stored = [(k, v) for k, v in view.kv.items() if v is not None]
    restored = decode_state(stored, records.decode_barrier)

    assert restored == ViewState.of(
        offsets=view.state.offsets,
        barriers=view.state.barriers,
        floors=view.state.floors,
        dropped=view.state.dropped,
    )
    assert view.state.pending and restored.pending == {}
    assert restored.floor(log.partition) == 7 and restored.dropped == 1


def test_a_state_and_a_context_survive_pickling() -> None:
    """A batch job ships them between processes; the copies decide the same."""
    log, view = Log(), DictView()
    refs_barrier, objects_barrier = log.barrier()
    view.apply([refs_barrier, objects_barrier, log.ref(None, log.ref_value(1), objects_offset=9)])
    state, context = pickle.loads(pickle.dumps((view.state, CONTEXT)))
    assert state == view.state and state.pending == view.state.pending

    more = [*log.objects(log.obj(1)), log.updateable(1, None, "t")]
    kv = dict(view.kv)
    assert apply_records(state, more, kv.get, context) == apply_records(
        view.state, more, kv.get, CONTEXT
    )
