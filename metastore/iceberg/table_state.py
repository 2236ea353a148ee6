"""A table as the Iceberg layer hands it around: its state at a version, a change a
commit asks for, a commit made ready, and pyiceberg's errors as ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import (
    TableMetadata,
    TableMetadataUtil,
    TableMetadataV1,
)
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
)

from metastore.engine.commits import NewObject
from metastore.errors import (
    BadRequest,
    CommitConflict,
    ValidationFailed,
)
from metastore.iceberg.answer_cache import AnswerKey
from metastore.iceberg.files import TableFiles
from metastore.iceberg.metadata_json import SnapshotsJson
from metastore.iceberg.table_updates import ModelKey
from metastore.model.changes import Change
from metastore.model.keys import EntityKey, Kind
from metastore.model.records import Entity
from metastore.model.requirements import Requirement
from metastore.util.retry import RetryPolicy

TEXT = "metadata-text"  # a result's metadata as JSON text (the file's bytes), for responses
# Set on every new table unless its create names them (as Iceberg's own catalogs do).
NEW_TABLE_PROPERTIES = {"write.parquet.compression-codec": "zstd"}
FORMAT_VERSION = "format-version"  # a create's property choosing the table's format version
DEFAULT_FORMAT_VERSION = "2"
# A request whose entity another commit moved (a lost AssertVersion) is redone on the
# fresh state at once: that state is already there to read, so there is nothing to wait
# for. 20 attempts in all, then the conflict reaches the client as 409.
REBASES = RetryPolicy(base_s=0.0, max_s=0.0, max_attempts=20, jitter=False)


@contextmanager
def iceberg_errors() -> Iterator[None]:
    """pyiceberg's outcomes as ours: a failed requirement is 409, a bad update 400."""
    try:
        yield
    except CommitFailedException as exc:
        raise CommitConflict(str(exc)) from None
    except (PydanticValidationError, IcebergValidationError) as exc:
        raise ValidationFailed(f"invalid table metadata: {first_line(exc)}") from None
    except (ValueError, NotImplementedError, LookupError, TypeError, AttributeError) as exc:
        raise BadRequest(f"cannot apply update: {first_line(exc)}") from None
    except StopIteration:  # pyiceberg's lookups by id, on metadata lacking what they find;
        # never let it out: raised into a worker thread's future, the request never ends
        raise BadRequest("cannot apply update: the metadata lacks what it refers to") from None


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:2000]


@dataclass(frozen=True, slots=True)
class TableState:
    key: EntityKey
    entity: Entity
    metadata: dict[str, Any]  # the spec's JSON (shared with the cache: never mutate)
    metadata_location: str | None

    def model(self) -> TableMetadata:
        with iceberg_errors():
            return TableMetadataUtil.parse_obj(self.metadata)

    def result(self, snapshots: str = "all") -> dict[str, Any]:
        metadata = self.metadata
        if snapshots == "refs":
            wanted = {ref["snapshot-id"] for ref in metadata.get("refs", {}).values()}
            kept = [s for s in metadata.get("snapshots", []) if s["snapshot-id"] in wanted]
            history = metadata.get("snapshot-log", [])
            start = len(history)  # its last entries whose snapshots are kept (as Iceberg's)
            while start and history[start - 1]["snapshot-id"] in wanted:
                start -= 1
            metadata = {**metadata, "snapshots": kept, "snapshot-log": history[start:]}
        return {"metadata-location": self.metadata_location, "metadata": metadata, "config": {}}


@dataclass(frozen=True, slots=True)
class TableChange:
    key: EntityKey
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass
class Prepared:
    """A request made ready to commit: its metadata files written, its pieces split."""

    io: TableFiles
    files: list[str] = field(default_factory=list)  # metadata files written (deleted on failure)
    # waits for the syncs of those files, still running (``CommitRequest.durable_first``)
    durable: list[Callable[[], None]] = field(default_factory=list)
    requirements: list[Requirement] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    objects: dict[int, NewObject] = field(default_factory=dict)
    # for the model cache: each new version with its snapshots' JSON
    models: list[tuple[ModelKey, TableMetadata, SnapshotsJson | None]] = field(default_factory=list)
    answers: list[tuple[AnswerKey, str]] = field(default_factory=list)  # for loads' cache
    results: list[dict[str, Any]] = field(default_factory=list)

    def discard(self) -> None:
        """Delete the metadata files written, garbage when the commit surely failed
        (blocking; best effort: an orphan is harmless, its name is unique)."""
        for location in self.files:
            self.io.delete_quietly(location)


def still_there(files: TableFiles, location: str) -> None:
    """400 when a register's metadata file is gone by the time its commit is built. A
    purge deletes that file last, while its purging record holds the location
    (``metastore.engine.dropped``): a register that read the file before and commits after the
    purge would name a table whose files are gone."""
    if not files.exists(location):
        raise BadRequest(
            f"metadata file {location} is gone (its table was purged meanwhile);"
            " nothing was registered"
        )


def empty_metadata() -> TableMetadata:
    """The base a create's updates apply to: version 1 with no columns, so the
    create's own ``upgrade-format-version`` and ``add-schema`` updates make the table
    (the same base every Iceberg catalog builds a new table from)."""
    return TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())


def placeholder(key: EntityKey) -> Entity:
    """Create results carry their metadata; the entity is read back by later loads."""
    return Entity(0, Kind.TABLE, key.path, {}, None, 0, 0, 0)


def table_key(namespace: tuple[str, ...], name: str) -> EntityKey:
    return EntityKey(Kind.TABLE, namespace, name)
