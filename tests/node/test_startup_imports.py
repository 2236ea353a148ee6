"""What a node imports when it starts, not in its first request."""

from __future__ import annotations

import subprocess
import sys


def test_the_app_loads_the_file_io_that_writes_metadata_files() -> None:
    # pyiceberg imports its FileIO on first use: a second or more, paid by the first
    # create that writes a metadata file unless the node loaded it with the app.
    script = "import sys, metastore.node.app; print('pyiceberg.io.pyarrow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["True"]
