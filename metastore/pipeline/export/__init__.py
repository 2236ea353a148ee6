"""``metastore export``: current state and full history of a scope, as tables."""
