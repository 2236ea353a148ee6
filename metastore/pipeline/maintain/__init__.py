"""``metastore maintain``: Iceberg table maintenance by the catalog."""
