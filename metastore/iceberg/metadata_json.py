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
share with its base, with the rest of the file, as always. The JSON is
the same; only the text's spelling may differ where two serializers spell the
same value differently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def metadata_document(
    metadata: TableMetadata,
    base: TableMetadata | None = None,
    base_snapshots: Sequence[Json] | None = None,
) -> tuple[str, Json]:
    """The metadata.json text of ``metadata`` and its JSON value. ``base`` and
    ``base_snapshots``: an earlier version of the same format version and its
    snapshots' JSON as serialized from those very snapshot objects; the ones
    ``metadata`` shares are not serialized again (how a snapshot is written depends on
    the format version alone: version 1 leaves out its sequence number)."""
    if (
        base is None
        or base_snapshots is None
        or base.format_version != metadata.format_version
        or len(base.snapshots) != len(base_snapshots)
    ):
        text = metadata_text(metadata)
        return text, json.loads(text)
    # ids of live objects are unique: ``base`` holds its snapshots for this whole call
    known = {id(s): item for s, item in zip(base.snapshots, base_snapshots, strict=True)}
    fresh = [s for s in metadata.snapshots if id(s) not in known]
    shell = metadata.model_copy(update={"snapshots": fresh})  # the rest, serialized as always
    if isinstance(shell, TableMetadataV3):
        document = _v3_json(shell)
    else:
        document = json.loads(shell.model_dump_json())
    written = iter(document.get(SNAPSHOTS, ()))
    document[SNAPSHOTS] = [known.get(id(s)) or next(written) for s in metadata.snapshots]
    return _text(document), document


def _v3_json(metadata: TableMetadataV3) -> Json:
    if metadata.next_row_id is None:
        raise BadRequest("format version 3 table metadata needs next-row-id (row lineage)")
    if metadata.next_row_id < 0:
        raise BadRequest(f"next-row-id must not be negative, got {metadata.next_row_id}")
    data: Json = metadata.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def _text(data: Json) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
