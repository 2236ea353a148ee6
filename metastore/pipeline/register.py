"""Registering an export as Iceberg tables of a catalog of the metastore itself.

Each exported table becomes ``<namespace>.<table>`` in the catalog the warehouse
names (``sales``, ``acme/sales``, or the caller's default catalog), through the
node's own Iceberg REST API with PyIceberg, so any engine that reads Iceberg can
query the catalog's history with SQL. A table already there is overwritten (same
columns) or replaced (different columns): it always holds the latest export.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError

from metastore.pipeline.node import NodeClient


def register(
    node: NodeClient, out: Path, tables: Iterable[str], warehouse: str, namespace: str
) -> dict[str, str]:
    """The Iceberg identifier of every registered table, by exported table name."""
    properties = {"uri": node.url}
    if warehouse:
        properties["warehouse"] = warehouse
    token = node.bearer()
    if token is not None:
        properties["token"] = token
    catalog = RestCatalog("metastore-export", **properties)
    catalog.create_namespace_if_not_exists(namespace)
    registered: dict[str, str] = {}
    for name in tables:
        data = pq.read_table(out / name)
        identifier = (namespace, name)
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            table = None
        if table is not None and table.schema().as_arrow().names != data.schema.names:
            catalog.drop_table(identifier)
            table = None
        if table is None:
            catalog.create_table(identifier, schema=data.schema).append(data)
        else:
            with warnings.catch_warnings():  # replacing an empty table deletes nothing
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                table.overwrite(data)
        registered[name] = f"{namespace}.{name}"
    return registered
