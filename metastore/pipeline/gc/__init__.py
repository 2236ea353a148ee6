"""``metastore gc``: two-phase garbage collection of unreachable objects and files."""
