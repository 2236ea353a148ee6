"""Native API: what one commit changed, entity by entity, before and after.

The history lists which entities a commit touched; a person reviewing it (the web
console's history page, an operator after an incident) wants to see what moved: the
table's new snapshot, a schema change, a property set. For each changed namespace,
table or view this reads the entity at the commit's parent and at the commit
(point-in-time reads of immutable commits) and, for Iceberg tables and views, a
short summary of their metadata (``metastore.iceberg.summaries``).

Reading the history needs the catalog's history privilege (the route's rule); the
detail of an entity is shown only to a caller who may read that entity, so the diff
shows no more than loading each entity would. System records (the catalog's own
settings, principals) are listed by kind and action only.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from aiohttp import web

from metastore.catalog.service import Metastore
from metastore.errors import NoSuchCommit, NotFound
from metastore.http import params
from metastore.http.authz import checker
from metastore.http.typedefs import ICEBERG, METASTORE
from metastore.iceberg import pieces
from metastore.iceberg.services import Iceberg
from metastore.iceberg.summaries import table_summary, view_summary
from metastore.model.keys import EntityKey, Kind
from metastore.model.records import Entity
from metastore.native.admin_routes import CATALOG
from metastore.native.render import commit_json, entity_json
from metastore.security.authorizer import Checker
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable

routes = web.RouteTableDef()

DIFF = CATALOG + "/commits/{commit_id}/diff"

_READ = {
    Kind.NAMESPACE: Privilege.NAMESPACE_READ_PROPERTIES,
    Kind.TABLE: Privilege.TABLE_READ_PROPERTIES,
    Kind.VIEW: Privilege.VIEW_READ,
}


def _commit_id(request: web.Request) -> int:
    raw = request.match_info["commit_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 20:  # "²".isdigit() is True
        raise NoSuchCommit(f"no commit {raw!r}")
    return int(raw)


class _Differ:
    """Reads one catalog's entities at two commits (blocking: runs off the event loop)."""

    def __init__(self, metastore: Metastore, iceberg: Iceberg, tenant: str, catalog: str) -> None:
        self._metastore = metastore
        self._iceberg = iceberg
        self._tenant = tenant
        self._catalog = catalog

    def entity_at(self, key: EntityKey, commit_id: int) -> Entity | None:
        try:
            return self._metastore.get_entity(self._tenant, self._catalog, key, commit_id)
        except NotFound:  # absent then, or that commit was collected
            return None

    def describe(self, entity: Entity, summary: bool = True) -> dict[str, Any]:
        """The entity's JSON; ``summary``: with its Iceberg metadata's summary."""
        body = entity_json(entity)
        if not summary or pieces.CORE not in entity.attachments:  # or a native entity
            return body
        if entity.kind is Kind.TABLE:
            state = self._iceberg.tables.state_of(self._tenant, self._catalog, entity)
            body["iceberg"] = table_summary(state.metadata, state.metadata_location)
        elif entity.kind is Kind.VIEW:
            metadata, location = self._iceberg.views.state_of(self._tenant, self._catalog, entity)
            body["iceberg"] = view_summary(metadata, location)
        return body

    def diff(self, commit_id: int, may_read: Callable[[EntityKey], Reading]) -> dict[str, Any]:
        commit = self._metastore.head(self._tenant, self._catalog, commit_id)
        parent_known = commit.parent != 0 and self._parent_exists(commit.parent)
        changes = []
        for change in commit.changes:
            key = EntityKey.decode(change.key)
            item: dict[str, Any] = {
                "kind": key.kind.label,
                "path": list(key.path),
                "action": change.action.lower(),
            }
            if key.kind is Kind.SYSTEM:
                changes.append(item)
                continue
            reading = may_read(key)
            if reading is Reading.NONE:
                changes.append(item | {"hidden": True})
                continue
            summary = reading is Reading.DATA
            before = self.entity_at(key, commit.parent) if parent_known else None
            after = self.entity_at(key, commit.id)
            item["before"] = None if before is None else self.describe(before, summary)
            item["after"] = None if after is None else self.describe(after, summary)
            if commit.parent != 0 and not parent_known:
                item["before-collected"] = True  # history past the retention window
            changes.append(item)
        return {"commit": commit_json(commit), "changes": changes}

    def _parent_exists(self, parent: int) -> bool:
        try:
            self._metastore.head(self._tenant, self._catalog, parent)
        except NoSuchCommit:
            return False
        return True


class Reading(Enum):
    """What a caller may see of a changed entity in a diff."""

    NONE = "none"  # that it changed, nothing more
    PROPERTIES = "properties"  # its properties and location (what a properties read shows)
    DATA = "data"  # also its Iceberg summary: metadata file, schema, snapshot and counts


def _reader(found: Checker | None, tenant: str, catalog: str) -> Callable[[EntityKey], Reading]:
    """A table's Iceberg summary names its metadata file, schema and snapshot, which
    only a load shows (``TABLE_READ_DATA``); its properties need only
    ``TABLE_READ_PROPERTIES``, as a properties read does."""

    def may_read(key: EntityKey) -> Reading:
        if found is None:  # authentication off: everything is shown
            return Reading.DATA
        securable = Securable.of_entity(tenant, catalog, key)
        if not found.allows(_READ[key.kind], securable):
            return Reading.NONE
        if key.kind is Kind.TABLE and not found.allows(Privilege.TABLE_READ_DATA, securable):
            return Reading.PROPERTIES
        return Reading.DATA

    return may_read


@routes.get(DIFF)
async def get_commit_diff(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    commit_id = _commit_id(request)
    metastore = request.app[METASTORE]
    differ = _Differ(metastore, request.app[ICEBERG], tenant, catalog)
    may_read = _reader(checker(request), tenant, catalog)
    return web.json_response(await metastore.read(differ.diff, commit_id, may_read))
