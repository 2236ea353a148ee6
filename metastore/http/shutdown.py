"""A node that can no longer do its work stops itself, as SIGTERM would stop it, and says
why with its exit status.

A cluster node whose view consumer stopped (its disk full, say) can serve neither
current reads nor the writes of the partitions the group still assigns it: it kept
its place in the group, so those partitions could not be written through any node
until an operator restarted it, while its owners retried a takeover that could not
succeed, a traceback a second. Stopping is what lets the group give its partitions
to the other nodes, and a supervisor restart it. ``request`` may be called from any
thread; the server then stops gracefully and ``metastore serve`` exits with status 1
and the reason on one line.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class Shutdown:
    """The server's stop event, and why the node asked for it, if it did."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()  # set by SIGTERM, SIGINT or ``request``
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Stop the node because of ``reason`` (the first reason given is kept)."""
        if self.reason is None:
            self.reason = reason
            log.critical("this node stops: %s", reason)
        self._loop.call_soon_threadsafe(self.event.set)
