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

from collections.abc import Callable

from aiohttp import web

from metastore.api.authz import may
from metastore.errors import Forbidden
from metastore.iceberg.context import Call
from metastore.keys import EntityKey
from metastore.locations import normalize
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable

MayRead = Callable[[EntityKey], bool]


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
    wanted = normalize(location, "table location")
    kept = call.iceberg.tables.records(call.tenant, call.catalog).kept_name(wanted.key)
    if kept is not None and not may_read(kept):
        raise Forbidden(
            f"table location {wanted} is the location of the dropped table {kept.display()}: "
            f"taking it needs {Privilege.TABLE_READ_DATA.name} on that table"
        )
