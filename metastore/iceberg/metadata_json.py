"""Table metadata as the spec's JSON text, for every format version the server serves.

The server writes each table version's metadata.json itself and answers loads
with the same JSON. pyiceberg reads format versions 1 to 3 but only writes 1
and 2 (its serializer refuses version 3), so version 3 is written here: the
model's fields by their spec names with unset (``None``) fields left out, as for
the older versions, after checking the one field version 3 adds to the table
and requires, ``next-row-id`` (row lineage; ``metastore.iceberg.lineage`` keeps
it). Versions 1 and 2 keep pyiceberg's serializer.

A commit's metadata repeats its base's snapshots, and serializing a snapshot
(pyiceberg's summary serializer runs in Python) is most of the cost of writing a
long history. pyiceberg's updates never copy the snapshots they keep, so a
commit on a version this node committed (``metadata_document`` with its base and
the base's snapshots' JSON) serializes only the snapshot objects it does not
share with its base, with the rest of the file, as always, and writes the text of
the ones it shares as the base's file had it. The JSON is
the same; only the text's spelling may differ where two serializers spell the
same value differently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.table.metadata import TableMetadata, TableMetadataV3

from metastore.errors import BadRequest

FORMAT_VERSIONS = (1, 2, 3)  # the Iceberg table format versions the server reads and writes
SNAPSHOTS = "snapshots"

Json = dict[str, Any]


def metadata_text(metadata: TableMetadata) -> str:
    """The metadata.json text of ``metadata`` (400 for a version 3 one without ``next-row-id``)."""
    if not isinstance(metadata, TableMetadataV3):
        return metadata.model_dump_json()
    return _text(_v3_json(metadata))


@dataclass(frozen=True, slots=True)
class SnapshotsJson:
    """A version's snapshots as its metadata file has them: each one's JSON value and,
    when known, its JSON text (both aligned with the model's ``snapshots``)."""

    items: Sequence[Json]
    texts: Sequence[str] | None


@dataclass(frozen=True, slots=True)
class MetadataFile:
    """A version's metadata.json: its text, its JSON value, and its snapshots' JSON
    (for the next commit on this version, ``metadata_document``'s ``base_snapshots``)."""

    text: str
    document: Json
    snapshots: SnapshotsJson


def metadata_document(
    metadata: TableMetadata,
    base: TableMetadata | None = None,
    base_snapshots: SnapshotsJson | None = None,
) -> MetadataFile:
    """The metadata.json of ``metadata``. ``base`` and ``base_snapshots``: an earlier
    version of the same format version and its snapshots' JSON as serialized from
    those very snapshot objects; the ones ``metadata`` shares are not serialized again
    (how a snapshot is written depends on the format version alone: version 1 leaves
    out its sequence number), and their text is reused when known."""
    if (
        base is None
        or not base.snapshots  # nothing to share: serializing it all at once is cheaper
        or base_snapshots is None
        or base.format_version != metadata.format_version
        or len(base.snapshots) != len(base_snapshots.items)
    ):
        return _full(metadata)
    # ids of live objects are unique: ``base`` holds its snapshots for this whole call
    known = {id(s): i for i, s in enumerate(base.snapshots)}
    fresh = [s for s in metadata.snapshots if id(s) not in known]
    shell = metadata.model_copy(update={"snapshots": fresh})  # the rest, serialized as always
    if isinstance(shell, TableMetadataV3):
        document = _v3_json(shell)
    else:
        document = json.loads(shell.model_dump_json())
    if SNAPSHOTS not in document:  # a serializer that leaves it out: no shortcut
        return _full(metadata)
    written = iter(document[SNAPSHOTS])
    items: list[Json] = []
    texts: list[str] = []
    for snapshot in metadata.snapshots:
        i = known.get(id(snapshot))
        item = next(written) if i is None else base_snapshots.items[i]
        reused = None if i is None or base_snapshots.texts is None else base_snapshots.texts[i]
        items.append(item)
        texts.append(reused if reused is not None else _text(item))
    document[SNAPSHOTS] = items
    text = _joined(document, {SNAPSHOTS: "[" + ",".join(texts) + "]"})
    return MetadataFile(text, document, SnapshotsJson(items, texts))


def _full(metadata: TableMetadata) -> MetadataFile:
    text = metadata_text(metadata)
    document = json.loads(text)
    return MetadataFile(text, document, SnapshotsJson(document.get(SNAPSHOTS, []), None))


def _joined(document: Json, written: Mapping[str, str]) -> str:
    """``_text(document)``, with the text of the fields in ``written`` as given."""
    fields = (
        f"{_text(name)}:{written[name] if name in written else _text(value)}"
        for name, value in document.items()
    )
    return "{" + ",".join(fields) + "}"


def _v3_json(metadata: TableMetadataV3) -> Json:
    if metadata.next_row_id is None:
        raise BadRequest("format version 3 table metadata needs next-row-id (row lineage)")
    if metadata.next_row_id < 0:
        raise BadRequest(f"next-row-id must not be negative, got {metadata.next_row_id}")
    data: Json = metadata.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def _text(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
