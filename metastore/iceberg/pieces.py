"""Iceberg table and view metadata stored as separate immutable objects.

A table's metadata (the spec's JSON) is split into pieces, each one object of
type ``metadata-piece`` referenced from the entity's ``attachments``:

- ``core``: the scalar fields (uuid, location, current ids, refs, statistics, the
  metadata location) plus, for every keyed or log field, its shape;
- keyed fields, one object per item: ``schema/<id>``, ``spec/<id>``,
  ``sort-order/<id>`` (Iceberg never changes what an id denotes);
- logs, as pages (``snapshots``, ``snapshot-log``, ``metadata-log``; for views
  ``versions`` and ``version-log``): full pages of ``PAGE_ITEMS`` items are frozen
  and linked by ``prev``; only the head page is rewritten when items are appended.

Table properties live in the entity's own ``properties``. Objects are
content-addressed (the id is a hash of the bytes), so an unchanged piece keeps
its id and is not written again: a commit writes the core, the head page of each
log it extends and the items it adds, whatever the length of the table's history.
Removing items from a log (expiring snapshots) rewrites that log's pages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metastore.engine.commits import NewObject
from metastore.engine.objects import MissingObject
from metastore.engine.objects import decode_piece as store_decode_piece
from metastore.model.codec import Codec
from metastore.model.objtypes import METADATA_PIECE

PAGE_ITEMS = 32
CORE = "core"
METADATA_LOCATION = "x-metadata-location"  # server-owned, in the core piece only
SKIPPED = "x-skipped"  # core only: per log, items its chain holds before the log's first

Json = dict[str, Any]
Loader = Callable[[int], Any]  # object id -> decoded JSON value (cached; never mutate it)


@dataclass(frozen=True, slots=True)
class Layout:
    keyed: Mapping[str, tuple[str, str]]  # field -> (attachment prefix, id field of an item)
    logs: tuple[str, ...]  # fields stored as pages

    @property
    def split_fields(self) -> frozenset[str]:
        return frozenset((*self.keyed, *self.logs, "properties"))


TABLE_LAYOUT = Layout(
    keyed={
        "schemas": ("schema", "schema-id"),
        "partition-specs": ("spec", "spec-id"),
        "sort-orders": ("sort-order", "order-id"),
    },
    logs=("snapshots", "snapshot-log", "metadata-log"),
)
VIEW_LAYOUT = Layout(keyed={"schemas": ("schema", "schema-id")}, logs=("versions", "version-log"))


def piece_id(data: bytes) -> int:
    """Content address: 62 hash bits under a set top bit (never a reserved low snowflake)."""
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
    return (digest >> 2) | (1 << 62)


def encode_piece(codec: Codec, kind: str, value: Any) -> NewObject:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    data = codec.encode(METADATA_PIECE.schema, {"kind": kind, "json": text})
    return NewObject(METADATA_PIECE.name, piece_id(data), data, value)


def decode_piece(codec: Codec, data: bytes) -> Any:
    return store_decode_piece(codec, data)


@dataclass(frozen=True, slots=True)
class Split:
    attachments: dict[str, int]
    objects: tuple[NewObject, ...]  # only those not already referenced by the old attachments


def split(
    codec: Codec,
    layout: Layout,
    metadata: Json,
    metadata_location: str | None,
    old_attachments: Mapping[str, int],
    old_metadata: Json | None,
    load: Loader,
) -> Split:
    """Pieces of ``metadata`` (the spec's JSON), reusing what ``old_metadata`` already stored."""
    known = set(old_attachments.values())
    attachments: dict[str, int] = {}
    written: dict[int, NewObject] = {}

    def put(name: str, obj: NewObject) -> None:
        attachments[name] = obj.id
        if obj.id not in known:
            written[obj.id] = obj

    split_fields = layout.split_fields  # a new set per read: not once per key
    core = {k: v for k, v in metadata.items() if k not in split_fields}
    core[METADATA_LOCATION] = metadata_location
    for name, (prefix, id_field) in layout.keyed.items():
        if name not in metadata:
            continue
        ids = []
        olds = _by_id(old_metadata.get(name) if old_metadata is not None else None, id_field)
        for item in metadata[name]:
            ids.append(item[id_field])
            attachment = f"{prefix}/{item[id_field]}"
            if attachment in old_attachments and olds.get(item[id_field]) == item:
                attachments[attachment] = old_attachments[attachment]  # stored as it is
                continue
            put(attachment, encode_piece(codec, prefix, item))
        core[name] = ids
    old_skipped = _skipped(load(old_attachments[CORE])) if CORE in old_attachments else {}
    skipped: dict[str, int] = {}
    for name in layout.logs:
        if name not in metadata:
            continue
        items: list[Any] = metadata[name]
        core[name] = len(items)
        old_items = old_metadata.get(name) if old_metadata is not None else None
        head_id = old_attachments.get(name)
        skip = old_skipped.get(name, 0)
        dropped = (
            _dropped(items, old_items, PAGE_ITEMS - 1 - skip) if old_items is not None else None
        )
        if head_id is not None and old_items is not None and dropped is not None:
            skip += dropped  # the chain's oldest items that left the log, still on its first page
            head = load(head_id)
            start = list(head["items"]) + items[len(old_items) - dropped :]
            if len(start) == len(head["items"]):
                attachments[name] = head_id
                if skip:
                    skipped[name] = skip
                continue
            prev = head["prev"]
        else:
            skip, start, prev = 0, list(items), 0
        if not start:
            continue
        if skip:
            skipped[name] = skip
        while len(start) > PAGE_ITEMS:
            page = encode_piece(codec, "page", {"prev": prev, "items": start[:PAGE_ITEMS]})
            if page.id not in known:
                written[page.id] = page
            prev, start = page.id, start[PAGE_ITEMS:]
        put(name, encode_piece(codec, "page", {"prev": prev, "items": start}))
    if skipped:
        core[SKIPPED] = skipped
    put(CORE, encode_piece(codec, CORE, core))
    return Split(attachments, tuple(written.values()))


def _by_id(items: Sequence[Any] | None, id_field: str) -> dict[Any, Any]:
    """The items of an old keyed field by their ids: an item equal to the one stored
    under its id is that piece, so it is not encoded and hashed again."""
    return {item.get(id_field): item for item in items or () if isinstance(item, dict)}


def _dropped(items: Sequence[Any], old: Sequence[Any], most: int) -> int | None:
    """How many of ``old``'s first items ``items`` leaves out while keeping the rest in
    order at its start (0: ``items`` extends ``old``), if at most ``most``; else None.

    A log bounded by a count (the metadata log keeps the table's last previous
    versions) drops its oldest entries as it grows: the chain keeps them on its first
    page and the core counts them (``SKIPPED``), so such a commit writes the head page
    only, as an append does, until a whole page would be skipped and the chain is
    written again without them.
    """
    for drop in range(min(most, len(old)) + 1):
        kept = len(old) - drop
        if len(items) >= kept and (
            not kept or (items[0] == old[drop] and list(items[:kept]) == list(old[drop:]))
        ):
            return drop
    return None


def _skipped(core: Any) -> dict[str, int]:
    """The number of items each log's chain holds before the log's first one."""
    found = core.get(SKIPPED) if isinstance(core, dict) else None
    return dict(found) if isinstance(found, dict) else {}


def assemble(
    layout: Layout, attachments: Mapping[str, int], properties: Mapping[str, str], load: Loader
) -> tuple[Json, str | None]:
    """The spec's JSON of the metadata the pieces hold, and its metadata file's location."""
    core = load(_need(attachments, CORE))
    skipped = _skipped(core)
    metadata: Json = {}
    for key, value in core.items():
        if key in (METADATA_LOCATION, SKIPPED):
            continue
        if key in layout.keyed:
            prefix = layout.keyed[key][0]
            metadata[key] = [load(_need(attachments, f"{prefix}/{i}")) for i in value]
        elif key in layout.logs:
            metadata[key] = _read_log(attachments.get(key), value, load, skipped.get(key, 0))
        else:
            metadata[key] = value
    metadata["properties"] = dict(properties)
    return metadata, core.get(METADATA_LOCATION)


def _read_log(head_id: int | None, count: int, load: Loader, skip: int = 0) -> list[Any]:
    pages: list[Sequence[Any]] = []
    page_id = head_id or 0
    total = 0
    while page_id:
        page = load(page_id)
        pages.append(page["items"])
        total += len(page["items"])
        page_id = page["prev"]
    if total != count + skip:
        raise MissingObject(f"metadata log has {total} items, expected {count} after {skip}")
    return [item for items in reversed(pages) for item in items][skip:]


def _need(attachments: Mapping[str, int], name: str) -> int:
    try:
        return attachments[name]
    except KeyError:
        raise MissingObject(f"metadata piece {name!r} is not attached") from None
