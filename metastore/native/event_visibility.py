"""Which change events a caller sees: those of entities it may list.

An event of a namespace, table or view is shown iff the caller's listing of that
kind in the entity's parent would show it (its LIST privilege on the parent, or
anything held on or below the entity: ``Checker.browse``), under its new name or,
for a rename, its old one. The catalog's own record is shown iff the caller's
listing of the tenant's catalogs would show the catalog. Visibilities are worked out
once per parent per page: a few dict lookups per event.

A table's event names its new snapshot and the snapshot's operation: what a load of
the table shows, so only a caller that may read its data (``TABLE_READ_DATA``) sees
them (``redactor``); one that may only list it sees that it changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from metastore.engine.events import Event
from metastore.engine.feed import Shows
from metastore.errors import Forbidden
from metastore.model.keys import CATALOG_RECORD, EntityKey, Kind
from metastore.security.authorizer import Checker
from metastore.security.policy import Visibility
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Securable

_LEVELS = {Kind.NAMESPACE: Level.NAMESPACE, Kind.TABLE: Level.TABLE, Kind.VIEW: Level.VIEW}


def _everything(event: Event) -> bool:
    return True


def shows_for(checker: Checker | None, tenant: str, catalog: str) -> Shows:
    """The filter of one page for ``checker``'s caller (None: auth off, all shown).
    Blocking (a catalog record id may be read): call it in a worker thread."""
    if checker is None or checker.service_admin:
        return _everything
    seen: dict[tuple[tuple[str, ...], Level], Visibility | None] = {}

    def browse(parent: Securable, level: Level) -> Visibility | None:
        cached = (parent.path, level)
        if cached not in seen:
            try:
                seen[cached] = checker.browse(parent, level)
            except Forbidden:
                seen[cached] = None
        return seen[cached]

    def sees(key: EntityKey) -> bool:
        if key == CATALOG_RECORD:
            shown = browse(Securable.of_tenant(tenant), Level.CATALOG)
            return shown is not None and shown.shows(catalog, checker.catalog_id(catalog))
        level = _LEVELS.get(key.kind)
        if level is None:
            return False
        shown = browse(Securable.of_namespace(tenant, catalog, key.namespace), level)
        return shown is not None and shown.shows(key.name)

    def shows(event: Event) -> bool:
        return sees(event.key) or (event.previous_key is not None and sees(event.previous_key))

    return shows


def redactor(checker: Checker | None, tenant: str, catalog: str) -> Callable[[Event], Event]:
    """Each shown event as ``checker``'s caller may see it: a table's snapshot fields only
    with ``TABLE_READ_DATA`` on it. Blocking, like ``shows_for``."""
    if checker is None or checker.service_admin:
        return _same
    reads: dict[EntityKey, bool] = {}

    def redact(event: Event) -> Event:
        if event.snapshot_id is None or event.key.kind is not Kind.TABLE:
            return event
        key = event.key
        if key not in reads:
            securable = Securable.of_entity(tenant, catalog, key)
            reads[key] = checker.allows(Privilege.TABLE_READ_DATA, securable)
        if reads[key]:
            return event
        return replace(event, snapshot_id=None, snapshot_operation=None)

    return redact


def _same(event: Event) -> Event:
    return event
