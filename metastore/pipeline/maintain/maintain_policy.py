"""Which snapshots and refs of a table expire: Iceberg's retention rules, pure.

The policy comes from the standard table properties, each settable as a default on
the table's namespace (innermost first) or on its catalog; the first layer that
sets a valid value wins, else Iceberg's own default:

- ``history.expire.max-snapshot-age-ms`` (5 days): a branch keeps the ancestors of
  its head younger than this, and a snapshot no ref reaches is kept while younger;
- ``history.expire.min-snapshots-to-keep`` (1): a branch keeps at least this many
  of its newest ancestors, whatever their age;
- ``history.expire.max-ref-age-ms`` (forever): a ref other than ``main`` whose
  snapshot is older than this is removed.

A ref's own ``max-ref-age-ms``, ``min-snapshots-to-keep`` and
``max-snapshot-age-ms`` override the policy for that ref, as in Iceberg. The
snapshot of every remaining ref is always kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE = "history.expire.max-ref-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS = 1
MAIN = "main"


@dataclass(frozen=True, slots=True)
class Policy:
    max_snapshot_age_ms: int = DEFAULT_MAX_SNAPSHOT_AGE_MS
    min_snapshots_to_keep: int = DEFAULT_MIN_SNAPSHOTS
    max_ref_age_ms: int | None = None  # None: refs never expire

    @classmethod
    def of(cls, layers: Sequence[Mapping[str, str]]) -> Policy:
        """The policy of ``layers``, the most specific first (table, namespaces, catalog)."""
        age = _first(layers, MAX_SNAPSHOT_AGE, minimum=0)
        keep = _first(layers, MIN_SNAPSHOTS, minimum=1)
        ref_age = _first(layers, MAX_REF_AGE, minimum=0)
        return cls(
            DEFAULT_MAX_SNAPSHOT_AGE_MS if age is None else age,
            DEFAULT_MIN_SNAPSHOTS if keep is None else keep,
            ref_age,
        )


def _first(layers: Sequence[Mapping[str, str]], name: str, *, minimum: int) -> int | None:
    """The first valid value of ``name``; a malformed one is skipped like an unset one,
    so a typo never expires more than the layer below would."""
    for layer in layers:
        raw = layer.get(name)
        if raw is None:
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            continue
        if value >= minimum:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Expiry:
    snapshot_ids: tuple[int, ...]  # to remove, oldest first
    refs: tuple[str, ...]  # to remove

    def __bool__(self) -> bool:
        return bool(self.snapshot_ids or self.refs)


def plan(metadata: Mapping[str, Any], policy: Policy, now_ms: int) -> Expiry:
    """What expires in ``metadata`` (the spec's JSON) at ``now_ms`` under ``policy``."""
    snapshots = {int(s["snapshot-id"]): s for s in metadata.get("snapshots") or []}
    refs: dict[str, Mapping[str, Any]] = dict(metadata.get("refs") or {})
    current = metadata.get("current-snapshot-id")
    if MAIN not in refs and current is not None and int(current) in snapshots:
        refs[MAIN] = {"snapshot-id": current, "type": "branch"}
    removed_refs: list[str] = []
    retained: set[int] = set()
    for name, ref in sorted(refs.items()):
        snapshot = snapshots.get(int(ref["snapshot-id"]))
        if snapshot is None:
            continue
        ref_age = _override(ref, "max-ref-age-ms", policy.max_ref_age_ms)
        if name != MAIN and ref_age is not None and now_ms - snapshot["timestamp-ms"] > ref_age:
            removed_refs.append(name)
            continue
        retained.add(int(snapshot["snapshot-id"]))
        if ref.get("type", "branch") == "branch":
            retained |= _branch_keeps(snapshots, snapshot, ref, policy, now_ms)
    oldest_kept = now_ms - policy.max_snapshot_age_ms
    reachable = _reachable(snapshots, refs, removed_refs)
    expired = [
        sid
        for sid, snapshot in sorted(snapshots.items(), key=lambda item: item[1]["timestamp-ms"])
        if sid not in retained and (sid in reachable or snapshot["timestamp-ms"] < oldest_kept)
    ]
    return Expiry(tuple(expired), tuple(removed_refs))


def _branch_keeps(
    snapshots: Mapping[int, Mapping[str, Any]],
    head: Mapping[str, Any],
    ref: Mapping[str, Any],
    policy: Policy,
    now_ms: int,
) -> set[int]:
    """A branch's retained ancestors: newest first, while fewer than the minimum are
    kept or the ancestor is younger than the maximum age."""
    keep = _override(ref, "min-snapshots-to-keep", policy.min_snapshots_to_keep) or 1
    age = _override(ref, "max-snapshot-age-ms", policy.max_snapshot_age_ms)
    oldest = now_ms - (policy.max_snapshot_age_ms if age is None else age)
    kept: set[int] = set()
    snapshot: Mapping[str, Any] | None = head
    while snapshot is not None:
        sid = int(snapshot["snapshot-id"])
        if sid in kept:
            break  # a cycle in hostile metadata
        if len(kept) < keep or snapshot["timestamp-ms"] >= oldest:
            kept.add(sid)
        else:
            break
        parent = snapshot.get("parent-snapshot-id")
        snapshot = snapshots.get(int(parent)) if parent is not None else None
    return kept


def _reachable(
    snapshots: Mapping[int, Mapping[str, Any]],
    refs: Mapping[str, Mapping[str, Any]],
    removed: Sequence[str],
) -> set[int]:
    """Snapshots in the ancestry of a remaining ref (the rest expire by age alone)."""
    found: set[int] = set()
    for name, ref in refs.items():
        if name in removed:
            continue
        snapshot = snapshots.get(int(ref["snapshot-id"]))
        while snapshot is not None and int(snapshot["snapshot-id"]) not in found:
            found.add(int(snapshot["snapshot-id"]))
            parent = snapshot.get("parent-snapshot-id")
            snapshot = snapshots.get(int(parent)) if parent is not None else None
    return found


def _override(ref: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = ref.get(name)
    return int(value) if isinstance(value, int) and value >= 0 else default
