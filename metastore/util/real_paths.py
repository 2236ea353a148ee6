"""A path's real path, as ``os.path.realpath`` answers it, resolved by the kernel.

Every file the server writes for a table passes a symlink check (``metastore.model.locations``):
the real path of what the operating system would touch must stay inside the real path of
its allowed root. ``os.path.realpath`` finds it one segment at a time in Python, an
``lstat`` and a string join per segment: 36-41 µs for a table's metadata folder or a
file in it, and a commit step checks four such paths. Here the kernel walks the path
once: the path is opened for its name only (``O_PATH``: no read permission needed,
nothing read) and the name the kernel gave the opened file is read back from
``/proc/self/fd``.

The answer is ``os.path.realpath``'s (non-strict) in every case; where the kernel cannot
give it as such, the answer is ``os.path.realpath``'s own:

- a path that does not exist yet (a new metadata file): its parent's real path with
  the missing name appended, as ``os.path.realpath`` appends names it cannot find;
  a dangling symlink (``lstat`` finds it, ``open`` does not) is left to it;
- any other error (a segment that is a file, a symlink loop, no permission to walk,
  no ``/proc``), a file deleted while open, or a relative path: ``os.path.realpath``.
"""

from __future__ import annotations

import os

_O_PATH = getattr(os, "O_PATH", 0)  # Linux; elsewhere every path takes the fallback
_DELETED = " (deleted)"  # the kernel's suffix for the name of a file unlinked while open


def real_path(path: str) -> str:
    """``os.path.realpath(path)`` for an absolute ``path``, mostly without its cost."""
    if not _O_PATH or not path.startswith("/"):
        return os.path.realpath(path)
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return _missing(path)
    except OSError:
        return os.path.realpath(path)
    try:
        named = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    if not named.startswith("/") or named.endswith(_DELETED):
        return os.path.realpath(path)
    return named


def _missing(path: str) -> str:
    """The real path of ``path``, which ``open`` did not find."""
    parent, name = os.path.split(path.rstrip("/"))
    if not name or name in (".", "..") or not parent:
        return os.path.realpath(path)
    try:
        os.lstat(path)
    except FileNotFoundError:
        real_parent = real_path(parent)  # recursion ends at "/", which always exists
        return real_parent.rstrip("/") + "/" + name
    except OSError:
        pass
    return os.path.realpath(path)  # a dangling symlink: realpath follows its text
