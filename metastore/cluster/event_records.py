"""The change events of one cluster write, as records of the events topic (opt-in).

With ``METASTORE_PUBLISH_EVENTS`` on, the partition owner produces these records in
the same Kafka transaction as the write's objects and ref record, so a downstream
reader with ``isolation.level=read_committed`` sees the events of exactly the commits
that committed, once each, in commit order per catalog (a catalog's events go to its
own partition number of the events topic, like its refs and objects).

The events are the feed's (``metastore.engine.events.derive``), worked out from the write
itself before it is handed to the owner: its new commits are the chain from the ref's
new HEAD back to the HEAD it expects, read from the write's own objects over this
node's view (a commit's parent, its index stripes and the entities before it are in
the view already, or earlier in the same write). Each record's value is the event as
the native API shows it, with its feed cursor as ``id``; its key is
``<tenant>\\x00<catalog>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from metastore.engine.events import derive
from metastore.engine.feed import after_event, encode_cursor
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects, StagedObjects, decode_piece
from metastore.model.codec import Codec
from metastore.model.keys import SEP
from metastore.model.objtypes import COMMIT, ENTITY, INDEX, METADATA_PIECE
from metastore.model.records import Commit, Entity, stripe_decode
from metastore.persistence.base import Persistence, RefUpdate, StoredObject

EventRecord = tuple[bytes, bytes]  # key, value
CONTENT_TYPE = ("content-type", b"application/json")
_CACHE_BYTES = 16 * 1024 * 1024  # decoded objects read back from the view for derivations


class EventRecords:
    """Derives the event records of writes over one node's view (blocking reads)."""

    def __init__(self, view: Persistence, codec: Codec) -> None:
        self._view = view
        self._codec = codec
        # a cache of its own: objects of a write that then fails stay out of the node's
        self._cache = ObjectCache(_CACHE_BYTES)
        self._decoders: dict[str, Callable[[StoredObject], Any]] = {
            COMMIT.name: lambda s: Commit.decode(codec, s.key.id, s.data),
            ENTITY.name: lambda s: Entity.decode(codec, s.data),
            INDEX.name: lambda s: stripe_decode(codec, s.data),
            METADATA_PIECE.name: lambda s: decode_piece(codec, s.data),
        }

    def of_write(
        self, objects: Sequence[StoredObject], ref_update: RefUpdate | None
    ) -> list[EventRecord]:
        """The records of every event of the commits ``objects`` and ``ref_update`` add."""
        if ref_update is None or ref_update.new is None:
            return []  # an updateable, or a deleted catalog: no commit of its own
        tenant, catalog = ref_update.key.tenant, ref_update.key.catalog
        staged = StagedObjects(
            CatalogObjects(self._view, self._codec, self._cache, tenant, catalog)
        )
        for stored in objects:
            decode = self._decoders.get(stored.key.type)
            if decode is not None:
                staged.stage(stored, decode(stored))
        mine = {o.key.id for o in objects if o.key.type == COMMIT.name}
        chain: list[Commit] = []
        commit_id = ref_update.new.head
        while commit_id in mine and commit_id != ref_update.expected_head:
            commit = staged.commit(commit_id)
            chain.append(commit)
            commit_id = commit.parent
        key = tenant.encode() + SEP + catalog.encode()
        records: list[EventRecord] = []
        for commit in reversed(chain):  # a reset moves HEAD to an old commit: none
            for event in derive(staged, commit):
                body = {
                    "id": encode_cursor(tenant, catalog, after_event(event)),
                    **event.to_json(),
                }
                records.append((key, json.dumps(body, separators=(",", ":")).encode()))
        return records
