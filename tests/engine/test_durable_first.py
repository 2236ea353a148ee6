"""A commit waits for the files it names to be durable just before its own durable
write, and is not written when one cannot be (``CommitRequest.durable_first``): its
file's syncs run while the commit is built, yet no durable commit names a file a crash
could take back. The waits here are plain callables, as the Iceberg tables give them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from metastore.engine.commits import CommitOutcome, CommitRequest
from metastore.errors import StorageUnavailable
from metastore.model.keys import RefKey
from tests.builders import (
    MAIN,
    FaultyPersistence,
    Node,
    create_catalog_ref,
    create_request,
    make_node,
    ns_key,
    table_key,
)

DB = ("db",)
C2 = RefKey("t1", "c2", "main")


def with_db(node: Node, *refs: RefKey) -> Node:
    for ref in refs:
        create_catalog_ref(node.committer, ref)
        node.committer.commit(ref, create_request(ns_key("db")))
    return node


def naming(name: str, wait: Callable[[], None]) -> CommitRequest:
    """A create of table ``name`` whose commit names a file that ``wait`` makes durable."""
    return dataclasses.replace(create_request(table_key(DB, name)), durable_first=(wait,))


def unsyncable() -> None:
    raise StorageUnavailable("cannot write file:///w/t/metadata/00001-x.metadata.json: EIO")


def exists(node: Node, ref: RefKey, name: str) -> bool:
    objects = node.objects(ref.tenant, ref.catalog)
    ref_now = node.persistence.get_ref(ref)
    assert ref_now is not None
    view = objects.index(objects.commit(ref_now.head))
    assert view is not None
    return view.get(table_key(DB, name).encode()) is not None


def test_the_wait_comes_after_the_commit_is_built_and_before_its_write(
    persistence: FaultyPersistence,
) -> None:
    node = with_db(make_node(persistence), MAIN)
    seen: list[str] = []

    def wait() -> None:
        seen.append(f"wait after {persistence.writes} writes")

    persistence.before_write = lambda: seen.append("write")
    writes = persistence.writes
    (outcome,) = node.committer.commit_batch(MAIN, [naming("t", wait)])
    assert isinstance(outcome, CommitOutcome)
    assert seen == [f"wait after {writes} writes", "write"]
    assert exists(node, MAIN, "t")


def test_a_commit_whose_file_cannot_be_made_durable_is_refused_and_its_batch_lands(
    persistence: FaultyPersistence,
) -> None:
    node = with_db(make_node(persistence), MAIN)
    waited: list[str] = []
    writes = persistence.writes
    results = node.committer.commit_batch(
        MAIN,
        [
            naming("a", lambda: waited.append("a")),
            naming("b", unsyncable),
            naming("c", lambda: waited.append("c")),
        ],
    )
    a, b, c = results
    assert isinstance(a, CommitOutcome) and isinstance(c, CommitOutcome)
    assert isinstance(b, StorageUnavailable) and "EIO" in b.message
    assert c.seq == a.seq + 1  # built again without b: one chain
    assert [exists(node, MAIN, n) for n in "abc"] == [True, False, True]
    assert persistence.writes == writes + 1  # nothing was written with b in it
    assert waited.count("a") >= 1 and waited.count("c") >= 1


def test_a_commit_refused_while_building_is_not_waited_for(persistence: FaultyPersistence) -> None:
    node = with_db(make_node(persistence), MAIN)
    node.committer.commit(MAIN, create_request(table_key(DB, "t")))
    waited: list[str] = []
    (refused,) = node.committer.commit_batch(MAIN, [naming("t", lambda: waited.append("t"))])
    assert type(refused).__name__ == "AlreadyExists" and waited == []


def test_in_a_group_of_catalogs_only_the_commit_without_its_file_is_refused(
    persistence: FaultyPersistence,
) -> None:
    node = with_db(make_node(persistence), MAIN, C2)
    results = node.committer.commit_batches(
        [
            (MAIN, [naming("a", lambda: None), naming("b", unsyncable)]),
            (C2, [naming("c", lambda: None)]),
        ]
    )
    (a, b), (c,) = results
    assert isinstance(a, CommitOutcome) and isinstance(c, CommitOutcome)
    assert isinstance(b, StorageUnavailable)
    assert exists(node, MAIN, "a") and not exists(node, MAIN, "b") and exists(node, C2, "c")
