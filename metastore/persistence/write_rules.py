"""The write rules every backend enforces the same way (so they fail the same way)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from metastore.errors import ObjectConflict, RefConditionFailed
from metastore.model.keys import ObjKey
from metastore.persistence.base import RefUpdate, StoredObject, UpdateableObject


def new_objects(
    objects: Sequence[StoredObject],
    stored: Callable[[bytes], StoredObject | None],
    deleted: Collection[bytes] = frozenset(),
) -> dict[bytes, StoredObject]:
    """The objects not stored yet, keyed by encoded key; ``ObjectConflict`` on differing bytes.

    Checks duplicates inside one call too: two different values for one id in the
    same batch are the same bug as one against the store. A key in ``deleted``
    (encoded keys this same write deletes) counts as absent, so an object that is
    deleted and written in one call is written after the deletion and stays: the
    check that decides "already stored, skip it" must never see an object that
    the write itself removes (a garbage-collected piece that a commit references
    again is written again).
    """
    pending: dict[bytes, StoredObject] = {}
    for obj in objects:
        raw_key = obj.key.encode()
        known = pending.get(raw_key)
        if known is None and raw_key not in deleted:
            known = stored(raw_key)
        if known is None:
            pending[raw_key] = obj
        elif known.data != obj.data:
            raise ObjectConflict(f"object {obj.key} is already stored with different bytes")
    return pending


def check_ref_update(update: RefUpdate, current_head: int | None) -> None:
    """Raise ``RefConditionFailed`` unless ``update`` may apply to a ref at ``current_head``."""
    if update.new is not None and update.new.key != update.key:
        raise ValueError(f"ref update for {update.key} carries a ref for {update.new.key}")
    if current_head != update.expected_head:
        expected = "no ref" if update.expected_head is None else f"HEAD {update.expected_head}"
        found = "none" if current_head is None else f"HEAD {current_head}"
        raise RefConditionFailed(f"ref {update.key}: expected {expected}, found {found}")


def check_updateable_key(key: ObjKey, new: UpdateableObject | None) -> None:
    if new is not None and new.key != key:
        raise ValueError(f"updateable CAS on {key} carries an object for {new.key}")


def deleted_keys(deletes: Sequence[ObjKey]) -> frozenset[bytes]:
    """The encoded keys a write deletes (applied before its objects)."""
    return frozenset(key.encode() for key in deletes)
