"""Group commit lanes: many submits, few batches, per-request outcomes, shutdown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from metastore.engine.commits import CommitOutcome, CommitRequest
from metastore.engine.lanes import CommitLanes
from metastore.errors import (
    AlreadyExists,
    CommitConflict,
    CommitStateUnknown,
    NoSuchNamespace,
    ObjectConflict,
    ServiceUnavailable,
)
from metastore.model.keys import RefKey
from metastore.model.requirements import AssertNotExists
from metastore.util.metrics import NodeMetrics
from tests.builders import (
    MAIN,
    FaultyPersistence,
    Node,
    create_catalog_ref,
    create_request,
    ns_key,
    table_key,
)

OTHER = RefKey("t1", "c2", "main")
DB = ("db",)


@pytest.fixture
def db(node: Node) -> Node:
    for ref in (MAIN, OTHER):
        create_catalog_ref(node.committer, ref)
        node.committer.commit(ref, create_request(ns_key("db")))
    return node


async def wait_blocked(persistence: FaultyPersistence) -> None:
    assert await asyncio.to_thread(persistence.blocked.wait, 5), "the write never started"


async def test_concurrent_submits_share_few_batches(db: Node, lanes: CommitLanes) -> None:
    base = db.objects().commit(db.persistence.get_ref(MAIN).head).seq  # type: ignore[union-attr]
    outcomes = await asyncio.gather(
        *(lanes.submit(MAIN, create_request(table_key(DB, f"t{i:03d}"))) for i in range(200))
    )
    assert all(isinstance(o, CommitOutcome) for o in outcomes)
    assert len({o.commit_id for o in outcomes}) == 200
    assert sorted(o.seq for o in outcomes) == list(range(base + 1, base + 201))
    assert lanes.commits == 200
    assert 1 <= lanes.batches < lanes.commits
    assert lanes.batches <= 10
    ref = db.persistence.get_ref(MAIN)
    assert ref is not None and ref.head == max(outcomes, key=lambda o: o.seq).commit_id


async def test_per_request_errors_are_raised_to_their_own_caller(
    db: Node, lanes: CommitLanes
) -> None:
    await lanes.submit(MAIN, create_request(table_key(DB, "taken")))
    requests = [
        create_request(table_key(DB, "a")),
        create_request(table_key(("missing",), "b")),
        create_request(table_key(DB, "taken")),
        create_request(table_key(DB, "c"), requirements=(AssertNotExists(table_key(DB, "a")),)),
        create_request(table_key(DB, "d")),
    ]
    results = await asyncio.gather(
        *(lanes.submit(MAIN, r) for r in requests), return_exceptions=True
    )
    assert [type(r) for r in results] == [
        CommitOutcome,
        NoSuchNamespace,
        AlreadyExists,
        CommitConflict,  # request "a" earlier in the same batch made the table exist
        CommitOutcome,
    ]
    assert isinstance(results[0], CommitOutcome) and isinstance(results[4], CommitOutcome)
    assert results[4].seq == results[0].seq + 1


async def test_refs_proceed_independently(
    db: Node, lanes: CommitLanes, persistence: FaultyPersistence
) -> None:
    gate = threading.Event()
    persistence.gate = (MAIN, gate)
    try:
        held = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "held"))))
        await wait_blocked(persistence)
        queued = [
            asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, f"q{i}"))))
            for i in range(10)
        ]
        # The other ref's lane is not stuck behind the blocked one.
        other = await asyncio.wait_for(
            lanes.submit(OTHER, create_request(table_key(DB, "free"))), 5
        )
        assert isinstance(other, CommitOutcome)
        await asyncio.sleep(0.01)
        assert not held.done() and not any(t.done() for t in queued)
    finally:
        gate.set()
    first = await asyncio.wait_for(held, 5)
    rest = await asyncio.wait_for(asyncio.gather(*queued), 5)
    # Everything queued behind the blocked batch went out together in the next one.
    assert sorted(o.seq for o in rest) == list(range(first.seq + 1, first.seq + 11))
    assert lanes.batches == 3


async def test_lanes_ready_together_go_out_in_one_group(
    db: Node, persistence: FaultyPersistence, executor: concurrent.futures.ThreadPoolExecutor
) -> None:
    refs = [RefKey("t1", f"g{i}", "main") for i in range(8)]
    for ref in refs:
        create_catalog_ref(db.committer, ref)
        db.committer.commit(ref, create_request(ns_key("db")))
    groups: list[list[RefKey]] = []
    commit_batches = db.committer.commit_batches

    def recorded(batches: list[tuple[RefKey, list[CommitRequest]]]) -> object:
        groups.append([ref for ref, _ in batches])
        return commit_batches(batches)

    db.committer.commit_batches = recorded  # type: ignore[method-assign,assignment]
    lanes = CommitLanes(db.committer, executor, max_groups=1)
    gate = threading.Event()
    persistence.gate = (MAIN, gate)
    try:
        held = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "held"))))
        await wait_blocked(persistence)
        # the one group allowed is in flight: these lanes wait, ready, for the next
        waiting = [
            asyncio.create_task(lanes.submit(ref, create_request(table_key(DB, f"t{i}"))))
            for i, ref in enumerate(refs)
        ]
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in waiting) and groups == [[MAIN]]
    finally:
        gate.set()
    await asyncio.wait_for(held, 5)
    outcomes = await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert groups == [[MAIN], refs]
    assert lanes.batches == 9 and lanes.commits == 9
    for i, (ref, outcome) in enumerate(zip(refs, outcomes, strict=True)):
        head = persistence.get_ref(ref)
        assert head is not None and head.head == outcome.commit_id
        objects = db.objects("t1", ref.catalog)
        index = objects.index(objects.commit(head.head))
        assert index is not None and index.get(table_key(DB, f"t{i}").encode()) is not None
    await lanes.close()


async def test_unexpected_failure_is_state_unknown_and_the_lane_recovers(
    db: Node, lanes: CommitLanes, persistence: FaultyPersistence
) -> None:
    persistence.fail_next = ObjectConflict("injected")  # a bug of ours: outcome unknown
    results = await asyncio.gather(
        *(lanes.submit(MAIN, create_request(table_key(DB, f"t{i}"))) for i in range(3)),
        return_exceptions=True,
    )
    assert [type(r) for r in results] == [CommitStateUnknown] * 3
    outcome = await lanes.submit(MAIN, create_request(table_key(DB, "t0")))
    assert isinstance(outcome, CommitOutcome)


async def test_a_cancelled_caller_does_not_cancel_its_commit(
    db: Node, lanes: CommitLanes, persistence: FaultyPersistence
) -> None:
    gate = threading.Event()
    persistence.gate = (MAIN, gate)
    caller = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "kept"))))
    await wait_blocked(persistence)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    gate.set()
    await lanes.close()
    view = db.objects().index(db.objects().commit(persistence.get_ref(MAIN).head))  # type: ignore[union-attr]
    assert view is not None and view.get(table_key(DB, "kept").encode()) is not None


async def test_close_refuses_new_submits_and_finishes_in_flight(
    db: Node, lanes: CommitLanes, persistence: FaultyPersistence
) -> None:
    gate = threading.Event()
    persistence.gate = (MAIN, gate)
    try:
        in_flight = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "a"))))
        await wait_blocked(persistence)
        queued = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "b"))))
        await asyncio.sleep(0)
        closing = asyncio.create_task(lanes.close())
        await asyncio.sleep(0.01)
        assert not closing.done()
        for ref in (MAIN, OTHER):
            with pytest.raises(ServiceUnavailable):
                await lanes.submit(ref, create_request(table_key(DB, "late")))
    finally:
        gate.set()
    await asyncio.wait_for(closing, 5)
    assert in_flight.done() and queued.done()
    a, b = in_flight.result(), queued.result()
    assert b.seq == a.seq + 1
    head = persistence.get_ref(MAIN)
    assert head is not None and head.head == b.commit_id
    with pytest.raises(ServiceUnavailable):
        await lanes.submit(MAIN, CommitRequest())


def _count(metrics: NodeMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "metastore_commit_duration_seconds_count", {"outcome": outcome}
    )
    return value or 0.0


async def test_every_commit_is_observed_whether_or_not_its_caller_waits(
    db: Node, persistence: FaultyPersistence, executor: concurrent.futures.ThreadPoolExecutor
) -> None:
    metrics = NodeMetrics()
    lanes = CommitLanes(db.committer, executor, metrics=metrics.commits)
    gate = threading.Event()
    persistence.gate = (MAIN, gate)
    try:
        gone = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "gone"))))
        await wait_blocked(persistence)
        queued = asyncio.create_task(lanes.submit(MAIN, create_request(table_key(DB, "gone"))))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
    finally:
        gate.set()
    with pytest.raises(AlreadyExists):  # the cancelled caller's table was created
        await asyncio.wait_for(queued, 5)
    await lanes.close()
    assert (_count(metrics, "committed"), _count(metrics, "failed")) == (1, 1)
    assert lanes.commits == 1 and lanes.batches == 2
