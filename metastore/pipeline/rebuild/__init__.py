"""``metastore rebuild``: a node's view built from the changelog on Spark."""
