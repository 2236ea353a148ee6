"""Exit statuses every job shares, and the one error that maps to "bad input".

0 = success, 1 = the job found a problem (audit: something dangles), 2 = bad usage
or a source the job cannot read (unknown tenant or catalog, an unreachable node or
broker, a directory that is not a store). Other tools script the jobs, so these
never change.
"""

from __future__ import annotations

from typing import Final

from metastore.errors import MetastoreError

OK: Final = 0
FOUND: Final = 1
USAGE: Final = 2


class JobError(MetastoreError):
    """Bad input or an unreadable source: the job stops with one line and exit 2."""
