"""The retention rules of ``metastore maintain`` on metadata built by hand: the cases a
real table is slow to reach (an unreferenced snapshot, a branch's own overrides, a
malformed property in one layer)."""

from __future__ import annotations

from typing import Any

from metastore.pipeline.maintain.maintain_policy import (
    DEFAULT_MAX_SNAPSHOT_AGE_MS,
    MAX_REF_AGE,
    MAX_SNAPSHOT_AGE,
    MIN_SNAPSHOTS,
    Policy,
    plan,
)

NOW = 1_000_000_000
HOUR = 3600 * 1000


def snapshot(sid: int, age_ms: int, parent: int | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"snapshot-id": sid, "timestamp-ms": NOW - age_ms}
    if parent is not None:
        found["parent-snapshot-id"] = parent
    return found


def metadata(snapshots: list[dict[str, Any]], refs: dict[str, Any]) -> dict[str, Any]:
    return {
        "snapshots": snapshots,
        "refs": refs,
        "current-snapshot-id": refs["main"]["snapshot-id"],
    }


def branch(sid: int, **extra: int) -> dict[str, Any]:
    return {"snapshot-id": sid, "type": "branch", **extra}


def test_the_first_layer_with_a_valid_value_wins() -> None:
    layers = [{MAX_SNAPSHOT_AGE: "soon"}, {MAX_SNAPSHOT_AGE: "10", MIN_SNAPSHOTS: "0"}, {}]
    policy = Policy.of(layers)
    assert policy.max_snapshot_age_ms == 10  # the table's typo falls through
    assert policy.min_snapshots_to_keep == 1  # 0 is not a valid minimum: the default
    assert policy.max_ref_age_ms is None
    assert Policy.of([]) == Policy(DEFAULT_MAX_SNAPSHOT_AGE_MS, 1, None)


def test_an_unreferenced_snapshot_expires_by_age_alone() -> None:
    # 3 <- 4 is main; 1 and 2 are a dropped branch's (no ref reaches them)
    table = metadata(
        [
            snapshot(1, 5 * HOUR),
            snapshot(2, HOUR // 2, 1),
            snapshot(3, 3 * HOUR),
            snapshot(4, 0, 3),
        ],
        {"main": branch(4)},
    )
    expiry = plan(table, Policy(max_snapshot_age_ms=HOUR, min_snapshots_to_keep=1), NOW)
    assert expiry.snapshot_ids == (1, 3)  # 2 is young; 3 is main's, past the minimum
    assert expiry.refs == ()


def test_a_branch_overrides_the_policy_and_a_tag_keeps_its_snapshot() -> None:
    chain = [snapshot(i, (10 - i) * HOUR, i - 1 if i > 1 else None) for i in range(1, 11)]
    refs = {
        "main": branch(10),
        "dev": branch(6, **{"min-snapshots-to-keep": 3}),
        "v2": {"snapshot-id": 2, "type": "tag"},
        "old": {"snapshot-id": 1, "type": "tag", "max-ref-age-ms": HOUR},
    }
    expiry = plan(metadata(chain, refs), Policy(max_snapshot_age_ms=1), NOW)
    kept = {i for i in range(1, 11)} - set(expiry.snapshot_ids)
    assert kept == {10, 6, 5, 4, 2}
    assert expiry.refs == ("old",)


def test_main_never_expires_by_ref_age() -> None:
    table = metadata([snapshot(1, 100 * HOUR)], {"main": branch(1)})
    policy = Policy.of([{MAX_REF_AGE: "1", MAX_SNAPSHOT_AGE: "1"}])
    assert not plan(table, policy, NOW)
