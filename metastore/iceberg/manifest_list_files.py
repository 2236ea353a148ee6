"""Writing a rebased manifest list: the snapshot's own manifests, then the head's.

pyiceberg's ``write_manifest_list`` encodes every manifest it writes, one record at
a time in Python, and a rebase writes the whole of the head's list again: the cost
of each append would grow with the table's history. For a version 2 table this
module writes the file with pyiceberg's own Avro pieces instead (the record writer,
file schema and header fields of its ``ManifestListWriterV2``, made once), as one
Avro block: the snapshot's own manifests encoded here, then the head's records as
they were encoded when the head's list was written on this node
(``ManifestLists`` keeps them), or encoded once if the head's list was read. The
file reads back (``read_manifest_list``) as the list
``write_manifest_list`` would have written. Other format versions go through
``write_manifest_list`` and are not kept encoded.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Sequence
from copy import copy
from functools import cache

from pyiceberg.avro.codecs import (
    AVRO_CODEC_KEY,
    CODEC_MAPPING_ICEBERG_TO_AVRO,
    KNOWN_CODECS,
    AvroCompressionCodec,
)
from pyiceberg.avro.encoder import BinaryEncoder
from pyiceberg.avro.file import MAGIC, META_SCHEMA, SYNC_SIZE, AvroFileHeader
from pyiceberg.avro.resolver import construct_writer, resolve_writer
from pyiceberg.avro.writer import Writer
from pyiceberg.io import OutputFile
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
    ManifestFile,
    write_manifest_list,
)
from pyiceberg.typedef import TableVersion
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from metastore.iceberg.manifest_lists import Listed

ENCODED_VERSION = 2  # the format version whose lists are written from encoded records
SCHEMA_NAME = "manifest_file"  # the Avro record name pyiceberg's writers give
AVRO_SCHEMA_KEY = "avro.schema"  # the Avro container's header entry for the file schema


def write(
    output: OutputFile,
    format_version: TableVersion,
    snapshot_id: int,
    parent_snapshot_id: int,
    sequence_number: int,
    codec: AvroCompressionCodec,
    own: Sequence[ManifestFile],
    head: Listed,
) -> Listed | None:
    """Write the list of ``own`` manifests (sequence numbers unassigned: they take
    ``sequence_number``) followed by ``head``'s (blocking); the list as written (with
    its encoded records) for a version 2 table, else None."""
    if format_version != ENCODED_VERSION:
        with write_manifest_list(
            format_version=format_version,
            output_file=output,
            snapshot_id=snapshot_id,
            parent_snapshot_id=parent_snapshot_id,
            sequence_number=sequence_number,
            avro_compression=codec,
        ) as writer:
            writer.add_manifests([*own, *head.manifests])
        return None
    records, header, schema = _layout()
    avro_codec = CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec, codec)
    if avro_codec not in KNOWN_CODECS:
        raise ValueError(f"Unsupported codec: {avro_codec}")  # as pyiceberg's writer
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": str(parent_snapshot_id),
        "sequence-number": str(sequence_number),
        "format-version": str(ENCODED_VERSION),
        AVRO_SCHEMA_KEY: schema,
        AVRO_CODEC_KEY: avro_codec,
    }
    assigned = tuple(_assigned(m, sequence_number) for m in own)
    tail = head.encoded if head.version == ENCODED_VERSION else None
    if tail is None:
        tail = encode(records, head.manifests)
    body = encode(records, assigned) + tail
    compressor = KNOWN_CODECS[avro_codec]  # (checked above)
    content = compressor.compress(body)[0] if compressor is not None else body
    sync = os.urandom(SYNC_SIZE)
    stream = output.create(overwrite=True)
    try:
        encoder = BinaryEncoder(stream)
        header.write(encoder, AvroFileHeader(MAGIC, meta, sync))
        encoder.write_int(len(assigned) + len(head.manifests))  # one block: every record
        encoder.write_int(len(content))
        encoder.write(content)
        encoder.write(sync)
    finally:
        stream.close()
    return Listed((*assigned, *head.manifests), body, ENCODED_VERSION)


@cache
def _layout() -> tuple[Writer, Writer, str]:
    """A version 2 list's record writer (pyiceberg's ``ManifestListWriterV2``'s), the
    Avro container's header writer, and the file schema as the header names it: the
    same for every list, made once."""
    file_schema = MANIFEST_LIST_FILE_SCHEMAS[ENCODED_VERSION]
    records = resolve_writer(
        record_schema=MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION], file_schema=file_schema
    )
    avro = AvroSchemaConversion().iceberg_to_avro(file_schema, schema_name=SCHEMA_NAME)
    return records, construct_writer(META_SCHEMA), json.dumps(avro)


def encode(writer: Writer, manifests: Iterable[ManifestFile]) -> bytes:
    """``manifests`` as records of a list ``writer`` writes (a block's content)."""
    buffer = io.BytesIO()
    encoder = BinaryEncoder(buffer)
    for manifest in manifests:
        writer.write(encoder, manifest)
    return buffer.getvalue()


def _assigned(manifest: ManifestFile, sequence_number: int) -> ManifestFile:
    """A manifest this commit adds with the commit's sequence number, as the writer
    assigns it to one whose numbers are unassigned (a copy: the one read stays as it
    was in ``ManifestLists``)."""
    assigned = copy(manifest)
    if assigned.sequence_number == UNASSIGNED_SEQ:
        assigned.sequence_number = sequence_number
    if assigned.min_sequence_number == UNASSIGNED_SEQ:
        assigned.min_sequence_number = sequence_number
    return assigned
