"""What a job reads: the contract both sources keep.

``rows`` gives an RDD of store rows ``(key, value)`` in which every Spark partition
holds whole catalogs (a catalog's refs, objects and updateables never straddle two
partitions) of the scope, and counts what it reads into ``progress.records``.
``check`` refuses, before any Spark work where it can, a scope naming a tenant or
catalog that does not exist. ``close`` releases what the source holds (a node's
checkpoint).
"""

from __future__ import annotations

from typing import Protocol

from pyspark import RDD
from pyspark.sql import SparkSession

from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import Row


class Source(Protocol):
    def describe(self) -> str: ...

    def check(self, scope: Scope) -> None: ...

    def rows(self, spark: SparkSession, scope: Scope, progress: Progress) -> RDD[Row]: ...

    def close(self) -> None: ...
