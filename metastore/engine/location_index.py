"""Unique, non-nested locations: a catalog's index of the locations its tables and views hold.

Two live tables or views of a catalog never share a location and never lie one
inside the other, so a purge that deletes only files inside its own table's
location cannot delete another live table's files. The commit engine keeps this
index for every commit, whichever API sent it (``claim`` and ``release`` run
inside ``CommitLogic``), so the check and the write are one atomic commit on the
catalog's HEAD: two concurrent creates at overlapping locations cannot both land.

Each held location is a system record ``location:<key>`` (``Location.key``: the
normalized, percent-decoded reading, so spellings a reader could confuse collide) naming the
entity that holds it (by entity id, which a rename keeps). Records sort by
location, so the three ways to overlap cost one lookup each: the same location
(one key), an ancestor (one key per ancestor segment), a descendant (one seek to
the prefix ``location:<location>/``). The records are derived state, like the
index itself: written with the commit that moves a location, not listed among
its changes or its outcome. Tables and views written before this index existed
hold no record until their location changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from metastore.engine.dropped import purging_key
from metastore.engine.dropped import record_key as dropped_key
from metastore.errors import AlreadyExists, BadRequest, Forbidden
from metastore.model.changes import Change, CreateEntity, DeleteEntity
from metastore.model.index import IndexValue
from metastore.model.keys import EntityKey, Kind
from metastore.model.locations import Location, normalize
from metastore.model.records import Entity

PREFIX = "location:"
HOLDER = "entity-id"  # record property: the entity id of the table or view holding it
# record property: the dropped ones, kept for undrop, that yielded the location to its
# holder, last first (comma-separated entity ids): it goes back to them when it is let go
YIELDED = "yielded-by"
MAX_YIELDED = 64  # a record names at most this many (the oldest are let go)

MayRead = Callable[[EntityKey], bool]  # whether the caller may read a table's data
# the privilege ``MayRead`` asks about, named in refusals (the security layer, above
# this one, grants it: ``security.privileges.Privilege.TABLE_READ_DATA``)
MAY_READ_PRIVILEGE = "TABLE_READ_DATA"


class KeyIndex(Protocol):
    """What is read of an index (a commit's view, or the one a commit is building)."""

    def get(self, key: bytes) -> IndexValue | None: ...

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, IndexValue]]: ...


class Records:
    """The location records of one catalog state: an index and its entity objects."""

    def __init__(self, index: KeyIndex, entity: Callable[[int], Entity]) -> None:
        self._index = index
        self._entity = entity

    def holder(self, key: str) -> int | None:
        """The entity id holding exactly the location of ``key`` (``Location.key``), if any."""
        value = self._index.get(record_key(key).encode())
        if value is None:
            return None
        return int(self._entity(value[1]).properties.get(HOLDER, "0"))

    def overlapping(self, location: Location) -> str | None:
        """A held location (its key) equal to, containing or inside ``location``, if any."""
        root = f"{location.scheme}://{location.authority}/"
        for size in range(len(location.decoded) + 1):
            ancestor = root + "/".join(location.decoded[:size])
            if self._index.get(record_key(ancestor).encode()) is not None:
                return ancestor
        return next(self._under(location), None)

    def yielded(self, key: str) -> list[int]:
        """The dropped ones that yielded the location of ``key`` to its holder, last first."""
        value = self._index.get(record_key(key).encode())
        if value is None:
            return []
        ids = self._entity(value[1]).properties.get(YIELDED, "")
        return [int(i) for i in ids.split(",") if i]

    def is_kept(self, entity_id: int) -> bool:
        """Whether ``entity_id`` is a dropped table or view kept until it is collected."""
        return self._index.get(dropped_key(entity_id).encode()) is not None

    def is_purging(self, entity_id: int) -> bool:
        """Whether ``entity_id`` is a dropped table or view whose purge has not ended."""
        return self._index.get(purging_key(entity_id).encode()) is not None

    def kept_name(self, key: str) -> EntityKey | None:
        """The name of the dropped table or view holding ``key``, kept until it is
        collected (None: a live one holds it, or none)."""
        holder = self.holder(key)
        if holder is None:
            return None
        value = self._index.get(dropped_key(holder).encode())
        return None if value is None else self._entity(value[1]).key

    def kept_owners(self, key: str) -> list[EntityKey]:
        """The names of the dropped tables and views, kept until they are collected, that
        the location of ``key`` (``Location.key``) belongs to: its holder if that is one,
        then those that yielded it (``claim``), still kept, last first. Empty when a live
        one holds it, or none."""
        holder = self.holder(key)
        if holder is None or not self.is_kept(holder):
            return []
        owners = []
        for entity_id in (holder, *self.yielded(key)):
            value = self._index.get(dropped_key(entity_id).encode())
            if value is not None:
                owners.append(self._entity(value[1]).key)
        return owners

    def inside(self, location: Location) -> list[str]:
        """The held locations (their keys) equal to ``location`` or inside it."""
        held = [location.key] if self.holder(location.key) is not None else []
        return held + self._below(location)

    def kept_by_purge(self, location: Location, purged: int) -> list[str]:
        """The held locations (their keys) equal to ``location`` or inside it whose files
        a purge of the table ``purged`` (whose location it is) keeps: all but its own while
        it holds that itself, unless a dropped one kept for undrop yielded it (to which it
        goes back when the purge ends, ``release``)."""
        held = self.inside(location)
        own = location.key
        yielded = any(self.is_kept(i) for i in self.yielded(own))
        if own in held and self.holder(own) == purged and not yielded:
            held.remove(own)
        return held

    def _below(self, location: Location) -> list[str]:
        return list(self._under(location))

    def _under(self, location: Location) -> Iterator[str]:
        """The held locations inside ``location``, read as they are asked for: the
        overlap check of every create wants only the first, if any."""
        prefix = record_key(location.key + "/").encode()
        for key, _ in self._index.items(prefix):
            yield EntityKey.decode(key).name.removeprefix(PREFIX)


def record_key(location: str) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), PREFIX + location)


def release(before: Entity | None, after: Entity | None, records: Records) -> Change | None:
    """The record ``before`` gives up when the change moves or deletes its location: back
    to the last dropped one still kept that yielded it (``claim``), else gone. Without
    that, a table registered from a dropped one's metadata file and then purged left the
    location free: its purge deleted the files the kept one still needs for its undrop."""
    old = _held(before)
    if old is None or old == _held(after):
        return None
    assert before is not None
    if records.holder(old) != before.entity_id:
        return None  # written before the index existed (or never held)
    yielded = [i for i in records.yielded(old) if records.is_kept(i)]
    if yielded:
        attributes = {HOLDER: str(yielded[0]), "kind": before.kind.label}
        if yielded[1:]:
            attributes[YIELDED] = ",".join(str(i) for i in yielded[1:])
        return CreateEntity(record_key(old), attributes)
    return DeleteEntity(record_key(old))


def claim(before: Entity | None, after: Entity | None, records: Records) -> Change | None:
    """The record ``after`` takes for a new location (after ``release``); 400 if it
    overlaps a held one (``check_free``)."""
    if after is None or after.kind not in (Kind.TABLE, Kind.VIEW) or after.location is None:
        return None
    new = normalize(after.location, f"{after.kind.label} location")
    if new.key == _held(before):
        return None
    check_free(records, new, after.key)
    attributes = {HOLDER: str(after.entity_id), "kind": after.kind.label}
    kept = records.holder(new.key)  # a dropped one that yields it (``check_free``)
    if kept is not None:
        yielded = [kept, *records.yielded(new.key)]
        attributes[YIELDED] = ",".join(str(i) for i in yielded[:MAX_YIELDED])
    return CreateEntity(record_key(new.key), attributes)


def check_free(records: Records, new: Location, key: EntityKey) -> None:
    """400 unless a table or view named ``key`` may hold ``new``: nothing holds it, nor
    a location around it or inside it, except a dropped one holding exactly ``new``
    that ``yields_to`` it (never one whose purge has not ended: its files are going).
    Such a one yields, as a drop followed by a create or a register of the same
    metadata expects (its collection's purge keeps what a live location holds), and
    cannot be undropped while it is taken."""
    clash = records.overlapping(new)
    if clash is None:
        return
    holder = records.holder(clash)
    if holder is not None and records.is_purging(holder):  # its files are going
        raise BadRequest(
            f"{key.kind.label} location {new} overlaps {clash}, whose dropped table's"
            " files are being purged: try again once the purge is done"
        )
    kept = records.kept_name(clash) if clash == new.key else None
    if kept is not None and yields_to(kept, key):
        return
    label = key.kind.label
    if kept is not None:
        raise BadRequest(
            f"{label} location {new} is the location of the dropped {kept.kind.label} "
            f"{kept.display()}, kept for undrop: only a {kept.kind.label} of its namespace "
            "may take it"
        )
    how = "is" if clash == new.key else "overlaps"
    raise BadRequest(
        f"{label} location {new} {how} the location {clash} of another live table or view: "
        "locations must be unique and not nested"
    )


def check_may_take(records: Records, location: Location, may_read: MayRead) -> None:
    """403 if ``location`` is exactly the one a dropped table keeps for its undrop and the
    caller may not read that table's data: the location would yield to a new table of
    its namespace (``yields_to``), whose credentials and metadata then reach its files.
    The Iceberg create, staged create and register ask it on HEAD before anything is
    vended or written (their answers hand out credentials and metadata), and every
    commit of a caller asks it of each table it puts at a location (``check_taking``).

    Every kept one the location belongs to is asked about, not only its holder: a
    dropped table holding a location that another dropped one yielded to it (one that
    took the location, then was dropped itself) would otherwise let whoever may read the
    second take the first one's files."""
    for kept in records.kept_owners(location.key):
        if not may_read(kept):
            raise Forbidden(
                f"table location {location} is the location of the dropped table "
                f"{kept.display()}: taking it needs {MAY_READ_PRIVILEGE} on that table"
            )


def check_taking(
    before: Entity | None, after: Entity | None, records: Records, may_read: MayRead
) -> None:
    """``check_may_take`` for a table a change puts at a new location (a create, a move),
    on the state its commit is building: the routes check the HEAD before anything is
    written or vended, and the commit checks again here, since an earlier change of the
    same commit may have handed the location back to a dropped table kept for undrop
    (deleting or moving the table that had taken it)."""
    if after is None or after.kind is not Kind.TABLE or after.location is None:
        return
    new = normalize(after.location, "table location")
    if new.key != _held(before):
        check_may_take(records, new, may_read)


def yields_to(kept: EntityKey, key: EntityKey) -> bool:
    """Whether a dropped table's (or view's) location, kept for its undrop, yields to a
    new one named ``key``: one of its kind in its own namespace. Whoever may create
    there may undrop it too (the same privilege); anyone else, who may create only
    elsewhere in the catalog, would get its files and credentials vended for them."""
    return kept.kind is key.kind and kept.namespace == key.namespace


def reclaim(entity: Entity, records: Records) -> Change | None:
    """The record an undropped table or view takes back, if its location yielded to
    another one since the drop (409 if something holds or overlaps it now)."""
    held = _held(entity)
    if held is None or records.holder(held) == entity.entity_id:
        return None  # never held one, or holds it still
    location = normalize(held)
    clash = records.overlapping(location)
    if clash is not None:
        raise AlreadyExists(
            f"{entity.kind.label} location {location} was taken by another table or view "
            f"(at {clash}) since the drop"
        )
    attributes = {HOLDER: str(entity.entity_id), "kind": entity.kind.label}
    return CreateEntity(record_key(held), attributes)


def _held(entity: Entity | None) -> str | None:
    """The key of the location ``entity`` may hold a record for (tables and views only)."""
    if entity is None or entity.kind not in (Kind.TABLE, Kind.VIEW) or entity.location is None:
        return None
    try:
        return normalize(entity.location).key
    except BadRequest:
        return None  # an old, unnormalizable location: it holds no record
