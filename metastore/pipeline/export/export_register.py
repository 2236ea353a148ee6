"""Registering an export as Iceberg tables of a catalog of the metastore itself.

Each exported table becomes ``<namespace>.<table>`` in the catalog the warehouse
names (``sales``, ``acme/sales``, or the caller's default catalog), through the
node's own Iceberg REST API with PyIceberg, so any engine that reads Iceberg can
query the catalog's history with SQL. A table already there is overwritten (same
columns) or replaced (different columns): it always holds the latest export.

Only a table an export registered (``EXPORT_PROPERTY``) is overwritten or replaced: a
``--register-namespace`` that names a namespace of the user's, holding a ``tables`` or
``commits`` table of its own, is refused before the export runs, never written into.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError, RESTError
from pyiceberg.table import Table

from metastore.pipeline.exits import JobError
from metastore.pipeline.node_client import NodeClient

EXPORT_PROPERTY = "metastore.export"  # "true" on the tables an export registered


def _catalog(node: NodeClient, warehouse: str) -> RestCatalog:
    properties = {"uri": node.url}
    if warehouse:
        properties["warehouse"] = warehouse
    token = node.bearer()
    if token is not None:
        properties["token"] = token
    return RestCatalog("metastore-export", **properties)


def _registered(catalog: RestCatalog, identifier: tuple[str, str]) -> Table | None:
    """The table at ``identifier`` if an export registered it, None if there is none;
    ``JobError`` for a table of anyone else's."""
    try:
        table: Table = catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    if table.properties.get(EXPORT_PROPERTY) != "true":
        raise JobError(
            f"{'.'.join(identifier)} exists and no export registered it: refusing to replace"
            " it; name another --register-namespace"
        )
    return table


def check_targets(node: NodeClient, tables: Iterable[str], warehouse: str, namespace: str) -> None:
    """Before the export runs: the catalog answers, the namespace exists (created if
    not), and every table the export would register is new or an export's."""
    with _catalog_refusals(warehouse):
        catalog = _catalog(node, warehouse)
        catalog.create_namespace_if_not_exists(namespace)
        for name in tables:
            _registered(catalog, (namespace, name))


@contextmanager
def _catalog_refusals(warehouse: str) -> Iterator[None]:
    """The catalog's refusal (no such tenant or catalog, no access, a name it will not
    take) as bad usage: one line naming the catalog, exit 2."""
    try:
        yield
    except RESTError as exc:
        raise JobError(f"--register {warehouse or '(default catalog)'}: {exc}") from None


def register(
    node: NodeClient, out: Path, tables: Iterable[str], warehouse: str, namespace: str
) -> dict[str, str]:
    """The Iceberg identifier of every registered table, by exported table name."""
    with _catalog_refusals(warehouse):
        return _register(_catalog(node, warehouse), out, tables, namespace)


def _register(
    catalog: RestCatalog, out: Path, tables: Iterable[str], namespace: str
) -> dict[str, str]:
    catalog.create_namespace_if_not_exists(namespace)
    registered: dict[str, str] = {}
    for name in tables:
        data = pq.read_table(out / name)
        identifier = (namespace, name)
        table = _registered(catalog, identifier)  # checked again: it may have changed since
        if table is not None and table.schema().as_arrow().names != data.schema.names:
            catalog.drop_table(identifier)
            table = None
        if table is None:
            marked = {EXPORT_PROPERTY: "true"}
            catalog.create_table(identifier, schema=data.schema, properties=marked).append(data)
        else:
            with warnings.catch_warnings():  # replacing an empty table deletes nothing
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                table.overwrite(data)
        registered[name] = f"{namespace}.{name}"
    return registered
