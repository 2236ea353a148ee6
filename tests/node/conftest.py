"""The node's tests run against the same real node processes as the native API's: its
fixtures (``tests/native/conftest.py``), shared rather than written twice."""

from tests.native.conftest import api, catalog, node, secured_node

__all__ = ["api", "catalog", "node", "secured_node"]
