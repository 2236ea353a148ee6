"""Dropped tables and views: kept, restorable, until garbage collection collects them.

A drop without purge is one commit that moves the entity's next version from its name
to the catalog's system record ``dropped:<entity id>`` (``changes.DropEntity``): the
name is free at once (a create may reuse it), the entity no longer loads or lists, and
everything it references stays reachable from the catalog's HEAD, so garbage
collection keeps its objects and its files (its location stays held in the location
index, ``metastore.engine.location_index``, so no other table can take it or nest in it). An
undrop (``changes.UndropEntity``) is the reverse move, in one commit, refused while
the name is taken. Each dropped instance has its own record (keyed by entity id), so a
name dropped twice keeps both, each restorable by its entity id.

The catalog property ``drop.retention-ms`` (default 7 days) says how long a record is
kept; past it, the catalog's expiry (``metastore.catalog.expiry``) purges the table's files
and deletes the record. The records are derived from the drop and undrop commits
alone, so they replicate and replay like every record.

A purge is made durable the same way: the commit that drops a table with purge (or
the expiry's, for one kept until now, ``changes.PurgeDropped``) moves it to the
system record ``purging:<entity id>``, and the record is deleted only once the purge
of its files has ended. While it exists the location stays held, and yields to no
new table (its files are going), the table is never undropped or listed, and a purge
that a crash cut short is done again by the next expiry. A purge deletes files that
reference others after them (``metastore.iceberg.purge``), so its next run still
reads every file that is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from metastore.errors import BadRequest
from metastore.model.changes import DROPPED_BY
from metastore.model.index import IndexValue
from metastore.model.keys import EntityKey, Kind, kind_prefix
from metastore.model.records import Entity

PREFIX = "dropped:"
PURGING_PREFIX = "purging:"
RETENTION = "drop.retention-ms"  # catalog property
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
MAX_RETENTION_MS = 10 * 365 * 24 * 3600 * 1000
KINDS = (Kind.TABLE, Kind.VIEW)


class KeyIndex(Protocol):
    """What is read of an index (a commit's view, or the one a commit is building)."""

    def get(self, key: bytes) -> IndexValue | None: ...

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, IndexValue]]: ...


def record_key(entity_id: int) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), f"{PREFIX}{entity_id}")


def purging_key(entity_id: int) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), f"{PURGING_PREFIX}{entity_id}")


@dataclass(frozen=True, slots=True)
class Dropped:
    """One dropped table or view: its kept version, where it lived, when and by whom."""

    record: EntityKey  # the ``dropped:<entity id>`` (or ``purging:``) record holding it
    entity: Entity  # its last version (path, properties, location, attachments)

    @property
    def key(self) -> EntityKey:
        """The name it had, and gets back on undrop."""
        return self.entity.key

    @property
    def dropped_at_us(self) -> int:
        return self.entity.updated_at_us

    @property
    def dropped_by(self) -> str:
        return self.entity.properties.get(DROPPED_BY, "")


def scan(index: KeyIndex, entity: Callable[[int], Entity]) -> Iterator[Dropped]:
    """Every dropped table and view of a catalog state (kept for undrop), by entity id."""
    return _records(index, entity, PREFIX)


def scan_purging(index: KeyIndex, entity: Callable[[int], Entity]) -> Iterator[Dropped]:
    """Every dropped table and view of a catalog state whose purge has not ended."""
    return _records(index, entity, PURGING_PREFIX)


def _records(index: KeyIndex, entity: Callable[[int], Entity], name: str) -> Iterator[Dropped]:
    prefix = kind_prefix((), Kind.SYSTEM) + name.encode()
    for raw, value in index.items(prefix):
        yield Dropped(EntityKey.decode(raw), entity(value[1]))


def find(
    index: KeyIndex, entity: Callable[[int], Entity], key: EntityKey, entity_id: int | None
) -> Dropped | None:
    """The dropped instance of ``key`` with ``entity_id`` (None: the one dropped last)."""
    if entity_id is not None:
        value = index.get(record_key(entity_id).encode())
        if value is None:
            return None
        found = Dropped(record_key(entity_id), entity(value[1]))
        return found if found.key == key else None
    latest: Dropped | None = None
    for dropped in scan(index, entity):
        if dropped.key == key and (latest is None or dropped.dropped_at_us > latest.dropped_at_us):
            latest = dropped
    return latest


def retention_ms(properties: Mapping[str, str]) -> int:
    """A catalog's retention (a value that is not one, set before it was checked: the default)."""
    raw = properties.get(RETENTION)
    if raw is None:
        return DEFAULT_RETENTION_MS
    try:
        return parse_retention(raw)
    except BadRequest:
        return DEFAULT_RETENTION_MS


def parse_retention(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_RETENTION_MS:
        raise BadRequest(
            f"{RETENTION} must be a whole number of milliseconds from 0 to "
            f"{MAX_RETENTION_MS}, got {raw!r}"
        )
    return int(raw)


def check_properties(updates: Mapping[str, str], removals: Sequence[str] = ()) -> None:
    """400 for a catalog properties change that sets a retention that is not one."""
    if RETENTION in updates:
        parse_retention(updates[RETENTION])
