"""The small files a setting names: a cluster secret, Kafka properties, a JWKS document,
a storage credential file.

A mistyped path can name something that is no such file: a device (``/dev/zero`` never
ends), a FIFO (opening it waits for a writer), or a log of gigabytes. Reading any of them
whole would hang the node or fill its memory before the setting is refused. Here a file
is opened without waiting, must be a regular file, and is read up to a bound.
"""

from __future__ import annotations

import os
import stat


class NotSmallFile(ValueError):
    """The path names something other than a regular file within the bound."""


class TooLarge(NotSmallFile):
    """A regular file past the bound."""


def read_small_file(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``; ``NotSmallFile`` past ``limit`` bytes or for
    anything but a regular file, ``OSError`` when it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotSmallFile("is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the size a stat reports can be stale: count what is read
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise TooLarge(f"is larger than {limit:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
