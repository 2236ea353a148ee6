"""``metastore audit``: referential integrity of a catalog, a tenant or everything."""
