"""Who may take a dropped table's location: one who may read that table's data.

A dropped table is kept, restorable, and holds its location; the location yields to a
new table of its namespace (``location_index.yields_to``), as a drop followed by a
create or a register of its metadata expects. A create answers credentials for its
new table's location (vended credentials need only the create privilege: the table is
new and empty), and a register answers the metadata it names; at a dropped table's
location both would hand its files to whoever may create in its namespace, also one
who could never read it. So a create or register there needs ``TABLE_READ_DATA`` on
the dropped table, checked before anything is written or vended (403 otherwise).
"""

from __future__ import annotations

from aiohttp import web

from metastore.engine.location_index import MayRead as MayRead
from metastore.engine.location_index import check_may_take as take_checked
from metastore.http.authz import may
from metastore.iceberg.routes.context import Call
from metastore.model.locations import normalize
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable


def reader(request: web.Request, call: Call) -> MayRead:
    """Whether the caller may read a table's data (everyone, with auth off); the check
    may read the catalog's record id: call it off the event loop."""
    allows = may(request)
    return lambda key: allows(
        Privilege.TABLE_READ_DATA, Securable.of_entity(call.tenant, call.catalog, key)
    )


def check_may_take(call: Call, location: str, may_read: MayRead) -> None:
    """403 if ``location`` is exactly the one a dropped table keeps and the caller may
    not read that table's data (blocking: reads the catalog's HEAD)."""
    records = call.iceberg.tables.records(call.tenant, call.catalog)
    take_checked(records, normalize(location, "table location"), may_read)
