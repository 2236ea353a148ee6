"""Deleting local files below a folder without following a link on the way.

A purge checks that each file it deletes is its table's own (symlinks resolved) right
before deleting it, but a check and a deletion by path are two steps: a folder of the
table swapped for a link to another table's folder between them sends the deletion
there. So a purge on a ``file://`` warehouse opens its table's folder once, by its
real path, and deletes each file relative to that handle, opening every folder below
it with ``O_NOFOLLOW``: a link met on the way refuses the deletion (``LinkOnTheWay``),
and a link in the last place is removed itself, never what it points to. Whatever is
swapped in after the folder was opened, nothing outside it is reached.
"""

from __future__ import annotations

import errno
import os
from types import TracebackType

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY
_BELOW = _DIRECTORY | os.O_NOFOLLOW


class LinkOnTheWay(OSError):
    """A folder on the way to the file is a symbolic link (or not a folder)."""


class LocalRoot:
    """A folder opened once by its real path; files below it deleted relative to it."""

    def __init__(self, path: str) -> None:
        """``path``: the folder as FileIO names it (``Location.local_path``); it may not
        exist (then nothing below it does either). Blocking."""
        self._literal = os.path.normpath(path)
        try:
            self._fd: int | None = os.open(os.path.realpath(path), _DIRECTORY)
        except FileNotFoundError:
            self._fd = None

    def unlink(self, path: str) -> bool:
        """Delete the file at ``path`` (as FileIO names it, below this folder): True if
        it was deleted, False if it was not there. ``ValueError`` for a path that is not
        below the folder; ``LinkOnTheWay`` when a folder on the way is a link."""
        relative = os.path.relpath(os.path.normpath(path), self._literal)
        parts = relative.split(os.sep)
        if relative in (os.curdir, "") or any(p in ("", os.curdir, os.pardir) for p in parts):
            raise ValueError(f"{path} is not below {self._literal}")
        if self._fd is None:
            return False
        opened: list[int] = []
        fd = self._fd
        try:
            for part in parts[:-1]:
                try:
                    fd = os.open(part, _BELOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise LinkOnTheWay(exc.errno, f"{part} is a link or no folder") from exc
                    raise
                opened.append(fd)
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            return False
        finally:
            for each in opened:
                os.close(each)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LocalRoot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
