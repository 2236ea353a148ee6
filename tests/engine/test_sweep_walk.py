"""The sweep's walk over a history that an earlier sweep has already cut."""

from __future__ import annotations

import pytest

from metastore.engine.objects import CatalogObjects
from metastore.engine.sweep import SweepPlan
from metastore.errors import NoSuchCommit
from metastore.model.objtypes import COMMIT
from metastore.persistence.memory import MemoryPersistence
from tests.builders import (
    MAIN,
    Node,
    create_catalog_ref,
    create_request,
    make_node,
    ns_key,
)


def chain(node: Node, length: int) -> list[int]:
    """The catalog's commits, oldest first: its root, then ``length`` namespaces."""
    ids = [create_catalog_ref(node.committer)]
    for i in range(length):
        ids.append(node.committer.commit(MAIN, create_request(ns_key(f"n{i}"))).commit_id)
    return ids


def fresh_objects(persistence: MemoryPersistence) -> CatalogObjects:
    """What a restarted node reads: no cache of the collected commits."""
    return make_node(persistence).objects()


def present(persistence: MemoryPersistence) -> object:
    return lambda keys: [stored is not None for stored in persistence.get_objects(keys)]


def test_a_root_older_than_the_collected_history_does_not_fail_the_sweep() -> None:
    """A recent HEAD below a stretch an earlier sweep collected: the walk down the mark's
    history ends at the gap instead of failing (404) the whole sweep, and what the root
    reaches is still spared."""
    persistence = MemoryPersistence()
    ids = chain(make_node(persistence), 8)
    key = make_node(persistence).objects().key
    collected = [key(COMMIT.name, c) for c in ids[2:5]]
    persistence.write([], None, collected)  # an earlier sweep took these
    objects = fresh_objects(persistence)
    head = objects.commit(ids[-1])
    candidates = (key(COMMIT.name, ids[0]), key(COMMIT.name, ids[6]))

    plan = SweepPlan(ids[-1], candidates, present(persistence))  # type: ignore[arg-type]
    deletes = plan.plan(objects, head, recent=[ids[0]])  # the root commit, below the gap

    assert deletes == (key(COMMIT.name, ids[6]),)  # on the mark's own history: not spared
    assert plan.spared == 1  # ids[0]: the recent HEAD itself, walked below the gap


def test_a_root_that_is_gone_is_damage_not_history() -> None:
    persistence = MemoryPersistence()
    ids = chain(make_node(persistence), 3)
    key = make_node(persistence).objects().key
    persistence.write([], None, [key(COMMIT.name, ids[1])])
    objects = fresh_objects(persistence)
    plan = SweepPlan(ids[-1], (), present(persistence))  # type: ignore[arg-type]
    with pytest.raises(NoSuchCommit):
        plan.plan(objects, objects.commit(ids[-1]), recent=[ids[1]])
