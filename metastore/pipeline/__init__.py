"""The data pipeline: jobs over a running node's or cluster's whole state, on Spark.

Every job reads one of two sources inside Spark tasks and gets the same thing from
both: rows of ``(key, value)`` in the store's key layout
(``metastore.persistence.rocksdb_layout``), each Spark partition holding whole catalogs. The
jobs decode those rows one way, with the catalog's own code (``RowsPersistence``
under ``CatalogObjects``, the index, the Iceberg pieces):

- ``embedded``: a checkpoint a running node takes on request, opened read-only and
  read by catalog key ranges;
- ``cluster``: the changelog topics, one task per partition, read to offsets the
  job can prove and applied with the view's own rules.

Modules, one concept each: ``session`` (Spark), ``options`` (the command line every
job shares), ``node`` (talking to a node, with its authentication), ``progress``,
``exits``, ``scope`` (which catalogs, their key ranges), ``rows``, the sources, and
one module per job.
"""
