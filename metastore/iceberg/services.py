"""The Iceberg layer's services, held together under one ``AppKey`` (``ICEBERG``)."""

from __future__ import annotations

from dataclasses import dataclass

from metastore.catalog_storage import CatalogStorage
from metastore.codec import Codec
from metastore.iceberg.files import Warehouse
from metastore.iceberg.tables import Tables
from metastore.iceberg.views import Views
from metastore.service import Metastore


@dataclass(frozen=True, slots=True)
class Iceberg:
    tables: Tables
    views: Views
    warehouse: Warehouse

    @classmethod
    def build(cls, metastore: Metastore, storage: CatalogStorage, codec: Codec) -> Iceberg:
        """Tables and views over the metastore, with files in each catalog's storage."""
        warehouse = Warehouse(storage)
        tables = Tables(metastore, codec, warehouse)
        return cls(tables, Views(metastore, codec, warehouse, tables), warehouse)
