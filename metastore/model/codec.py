"""Avro (fastavro, schemaless) encoding of every stored record.

Each value starts with a 3-byte header: a format byte (0x01) and the writer's
schema version (uint16, big-endian). A reader decodes with the writer's schema
and resolves to its own newest version, so nodes of different releases can run
side by side during a rolling upgrade as long as schemas evolve compatibly (new
fields carry defaults). Schemas live in ``schemas/avro/<name>.v<N>.avsc``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from metastore.errors import MetastoreError
from metastore.util.resources import schemas_dir

FORMAT = 0x01
HEADER_LEN = 3
_FILE = re.compile(r"^(?P<name>[a-z_]+)\.v(?P<version>[0-9]+)\.avsc$")


class CorruptRecord(MetastoreError):
    """Stored bytes that no known schema version can read."""


class Codec:
    def __init__(self, directory: Path) -> None:
        raw: dict[tuple[str, int], Any] = {}
        for path in sorted(directory.glob("*.avsc")):
            match = _FILE.match(path.name)
            if match is None:
                raise ValueError(f"unexpected schema file name: {path.name}")
            raw[(match["name"], int(match["version"]))] = json.loads(path.read_text())
        self._raw = raw
        self._split: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._schemas: dict[tuple[str, int], Any] = {}
        named: dict[str, Any] = {}
        pending = dict(raw)
        # Records may reference named types declared in other files (Commit -> Index):
        # parse to a fixed point, newest versions last so they win the shared names.
        while pending:
            progressed = False
            for key in sorted(pending, key=lambda k: (k[1], k[0])):
                try:
                    self._schemas[key] = parse_schema(pending[key], named_schemas=named)
                except Exception as exc:  # fastavro raises UnknownType (a plain Exception)
                    if "Unknown type" not in str(exc) and type(exc).__name__ != "UnknownType":
                        raise
                    continue
                del pending[key]
                progressed = True
            if not progressed:
                raise ValueError(f"unresolvable schema references in {sorted(pending)}")
        self._current: dict[str, int] = {}
        for name, version in self._schemas:
            self._current[name] = max(version, self._current.get(name, 0))

    def names(self) -> list[str]:
        return sorted(self._current)

    def version(self, name: str) -> int:
        return self._current[name]

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        return self.encode_with(name, self._current[name], record)

    def encode_with(self, name: str, version: int, record: Mapping[str, Any]) -> bytes:
        """Encode with an explicit schema version (tests and downgrade tooling)."""
        buf = io.BytesIO()
        buf.write(bytes((FORMAT,)) + version.to_bytes(2, "big"))
        schemaless_writer(buf, self._schemas[(name, version)], record)
        return buf.getvalue()

    def frame(self, name: str, version: int, body: bytes) -> bytes:
        """A record whose Avro ``body`` was written outside fastavro for ``version`` of
        ``name`` (``metastore.model.index_codec``); refused unless that is the current version,
        so a new schema version cannot be written with an old writer."""
        if version != self._current[name]:
            raise ValueError(
                f"{name}: body written for v{version}, current is v{self.version(name)}"
            )
        return bytes((FORMAT,)) + version.to_bytes(2, "big") + body

    def encode_around(
        self,
        name: str,
        record: Mapping[str, Any],
        field: str,
        raw: bytes,
        through: str | None = None,
    ) -> bytes:
        """``encode(name, record)`` with ``field``'s value given as its Avro bytes ``raw``
        (or the values of ``field`` through ``through``, consecutive fields, as theirs).

        An Avro record is its fields' encodings one after another, so the fields before
        and after ``field`` are written as two records of their own around ``raw``: the
        same bytes as a full encode, without writing ``field`` again (a commit's embedded
        index, mostly unchanged since its parent's: ``metastore.model.index_codec``)."""
        before, after = self._around(name, field, through or field)
        buf = io.BytesIO()
        buf.write(bytes((FORMAT,)) + self._current[name].to_bytes(2, "big"))
        schemaless_writer(buf, before, record)
        buf.write(raw)
        schemaless_writer(buf, after, record)
        return buf.getvalue()

    def _around(self, name: str, field: str, through: str) -> tuple[Any, Any]:
        split = self._split.get((name, field, through))
        if split is None:
            schema = self._raw[(name, self._current[name])]
            names = [f["name"] for f in schema["fields"]]
            at, last = names.index(field), names.index(through)
            if last < at:
                raise ValueError(f"{name}: {through!r} comes before {field!r}")

            def part(suffix: str, fields: list[Any]) -> Any:
                return parse_schema(
                    {"type": "record", "name": f"{schema['name']}_{suffix}", "fields": fields},
                    named_schemas={},
                )

            fields = schema["fields"]
            split = part("before", fields[:at]), part("after", fields[last + 1 :])
            self._split[(name, field, through)] = split
        return split

    def decode(self, name: str, data: bytes) -> dict[str, Any]:
        if len(data) < HEADER_LEN or data[0] != FORMAT:
            raise CorruptRecord(f"{name}: not a metastore record (bad header)")
        writer_version = int.from_bytes(data[1:3], "big")
        writer = self._schemas.get((name, writer_version))
        if writer is None:
            raise CorruptRecord(
                f"{name}: written with schema v{writer_version}, this node knows up to "
                f"v{self._current.get(name)}; upgrade this node"
            )
        current = self._current[name]
        reader = None if writer_version == current else self._schemas[(name, current)]
        record = schemaless_reader(io.BytesIO(data[HEADER_LEN:]), writer, reader)
        if not isinstance(record, dict):
            raise CorruptRecord(f"{name}: decoded to {type(record).__name__}, not a record")
        return record

    def leading_longs(self, name: str, data: bytes, fields: Sequence[str]) -> tuple[int, ...]:
        """The leading ``fields`` of a record, read without decoding the rest: each must be
        a ``long`` at that place in the writer's schema version (a commit's parent and
        sequence number, for walks over a long history; a full decode reads its index)."""
        if len(data) < HEADER_LEN or data[0] != FORMAT:
            raise CorruptRecord(f"{name}: not a metastore record (bad header)")
        writer = self._schemas.get((name, int.from_bytes(data[1:3], "big")))
        leading = [(f["name"], f["type"]) for f in (writer or {}).get("fields", [])[: len(fields)]]
        if leading != [(field, "long") for field in fields]:
            raise CorruptRecord(f"{name}: this version does not start with longs {list(fields)}")
        values: list[int] = []
        at = HEADER_LEN
        for _ in fields:
            value, shift = 0, 0
            while True:
                if at >= len(data) or shift > 63:
                    raise CorruptRecord(f"{name}: truncated long")
                byte = data[at]
                at += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            values.append((value >> 1) ^ -(value & 1))  # zigzag
        return tuple(values)


@cache
def default_codec() -> Codec:
    """The codec over the shipped schemas; immutable once loaded, so shared."""
    return Codec(schemas_dir() / "avro")
