"""``python -m metastore`` with the tests' loop guard (``harness.loop_guard``): each
database access the node makes on its event loop is appended, with its stack, to a
file of the directory ``METASTORE_TEST_LOOP_GUARD`` names. Run as
``python -m harness.guarded_node serve ...``; ``harness.node`` does when that is set."""

from __future__ import annotations

import os

from harness.loop_guard import GUARD_ENV, append_to, watch
from metastore.node.cli import main

if __name__ == "__main__":
    with watch(append_to(os.environ[GUARD_ENV])):
        code = main()
    raise SystemExit(code)
