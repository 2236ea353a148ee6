"""Point reads tried on the event loop from memory alone, before a worker thread.

A point read on a warm node (a table load, an entity, a catalog's ref) is a few
lookups in the node's caches: microseconds. Handing it to a worker thread and back
costs far more. Measured on a table load answered from the caches, one client:
0.55-0.64 ms of node CPU and 0.71-0.84 ms per load through a thread, against
0.34-0.39 ms and 0.48-0.54 ms run on the loop. But the loop must never wait on the
disk, a file or the network: one slow read would stall every request of the node.

So a point read is first run on the loop inside ``memory_only()``. Every place
that would wait (the RocksDB handle, a FileIO, a credentials file, a credential
vendor) or would do work that grows with a table's history (metadata not cached
yet) calls ``check()`` first, which raises ``WouldWait`` there. The read is then run
again from its start in a worker thread, where ``check`` passes. A read changes
nothing but the caches it fills, so the attempt on the loop leaves nothing half
done. The flag belongs to one thread: worker threads never see it.
"""

from __future__ import annotations

import threading


class WouldWait(BaseException):
    """A read under ``memory_only`` reached something that waits or costs; run it in a
    worker thread instead. A ``BaseException``, as ``asyncio.CancelledError`` is: code
    that handles ``Exception`` (a read that turns a storage error into a 404 or a 503)
    must not take it for a failure and answer from the loop."""


class _Flag(threading.local):
    on = False


_flag = _Flag()


class memory_only:
    """Within the block, on this thread, ``check`` raises ``WouldWait``. Named and used
    as a function (``with memory_only():``); a class, not a generator, since every
    point read enters it (a point read's own cost 1.43 -> 1.07 µs)."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _flag.on
        _flag.on = True

    def __exit__(self, *exc: object) -> None:
        _flag.on = self._before


def check() -> None:
    """Call before anything that may wait (I/O) or cost more than a lookup."""
    if _flag.on:
        raise WouldWait
