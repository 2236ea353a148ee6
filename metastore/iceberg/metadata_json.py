"""Table metadata as the spec's JSON text, for every format version the server serves.

The server writes each table version's metadata.json itself and answers loads
with the same JSON. pyiceberg reads format versions 1 to 3 but only writes 1
and 2 (its serializer refuses version 3), so version 3 is written here: the
model's fields by their spec names with unset (``None``) fields left out, as for
the older versions, after checking the one field version 3 adds to the table
and requires, ``next-row-id`` (row lineage; ``metastore.iceberg.lineage`` keeps
it). Versions 1 and 2 keep pyiceberg's serializer, byte for byte what the server
always wrote for them.
"""

from __future__ import annotations

import json

from pyiceberg.table.metadata import TableMetadata, TableMetadataV3

from metastore.errors import BadRequest

FORMAT_VERSIONS = (1, 2, 3)  # the Iceberg table format versions the server reads and writes


def metadata_text(metadata: TableMetadata) -> str:
    """The metadata.json text of ``metadata`` (400 for a version 3 one without ``next-row-id``)."""
    if not isinstance(metadata, TableMetadataV3):
        return metadata.model_dump_json()
    if metadata.next_row_id is None:
        raise BadRequest("format version 3 table metadata needs next-row-id (row lineage)")
    if metadata.next_row_id < 0:
        raise BadRequest(f"next-row-id must not be negative, got {metadata.next_row_id}")
    data = metadata.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
