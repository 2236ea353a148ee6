"""The Iceberg layer's services, held together under one ``AppKey`` (``ICEBERG``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from metastore.catalog.service import Metastore
from metastore.iceberg.answer_cache import DEFAULT_BYTES
from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT
from metastore.iceberg.files import Warehouse
from metastore.iceberg.reports import MetricsReports
from metastore.iceberg.tables import Tables
from metastore.iceberg.views import Views
from metastore.model.codec import Codec
from metastore.storage.catalog_storage import CatalogStorage
from metastore.storage.sts import Vendor


@dataclass(frozen=True, slots=True)
class Iceberg:
    tables: Tables
    views: Views
    warehouse: Warehouse
    reports: MetricsReports = field(default_factory=MetricsReports)  # metastore.iceberg.reports
    vendor: Vendor = field(default_factory=Vendor)  # vended credentials (metastore.storage.sts)

    @classmethod
    def build(
        cls,
        metastore: Metastore,
        storage: CatalogStorage,
        codec: Codec,
        load_cache_bytes: int = DEFAULT_BYTES,
        *,
        sync: bool = True,
        read_limit: int = DEFAULT_READ_LIMIT,
    ) -> Iceberg:
        """Tables and views over the metastore, with files in each catalog's storage;
        ``load_cache_bytes`` bounds the metadata text kept for loads (``answer_cache``);
        ``sync``: local files are durable before a commit names them (``--fsync``);
        ``read_limit``: the bytes of one client-written file the node reads whole
        (``bounded_input``)."""
        warehouse = Warehouse(storage, sync=sync, read_limit=read_limit)
        tables = Tables(metastore, codec, warehouse, load_cache_bytes)
        return cls(tables, Views(metastore, codec, warehouse, tables), warehouse)
