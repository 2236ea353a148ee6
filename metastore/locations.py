"""Storage locations: one normalizer and one containment rule for every path the server handles.

A table's or view's location, every path inside its metadata, and every file the
server reads, writes or deletes for it pass through here, on both APIs, so that
"inside" means the same thing everywhere:

- **Normalized, then compared by segments.** ``.`` segments and duplicate slashes
  are dropped, ``..`` is resolved textually (refused if it climbs above the path's
  root), the scheme is lower-cased, and a bare absolute path means ``file://``.
  ``inside`` compares whole segments, never string prefixes, so ``.../t`` does
  not contain ``.../t2``.
- **Ambiguous spellings are refused, not guessed.** Readers differ on
  percent-encoding (pyiceberg's FileIO keeps ``%2e%2e`` literally, Java's URI
  decodes it to ``..``), so a segment that decodes (once or repeatedly) to ``.``,
  ``..``, or anything containing a slash, a backslash or a control character is
  a 400; so are ``?`` and ``#``, which URI parsers cut off, and relative paths,
  which FileIO resolves against the server's working directory.
- **Symlinks** (``file://`` only, with ``resolve=True``): the real path of what
  the operating system would touch, the literal path resolved by ``realpath``,
  must also stay inside the real path of the root. Only paths the server acts on
  need this; it touches the filesystem, so callers run it off the event loop.

The allowed roots are always passed in (a catalog's list), never read from the
node's configuration here: where a catalog may keep files is the caller's policy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from metastore.errors import BadRequest

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_DECODE_ROUNDS = 4  # %252e -> %2e -> . : decode until stable, at most this often


@dataclass(frozen=True, slots=True)
class Location:
    """A normalized location: ``scheme://authority/seg/seg``; ``raw`` is what was given."""

    scheme: str
    authority: str
    segments: tuple[str, ...]
    raw: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}/" + "/".join(self.segments)

    def within(self, root: Location, *, strict: bool = False) -> bool:
        """Equal to ``root`` or below it (``strict``: below it only)."""
        if (self.scheme, self.authority) != (root.scheme, root.authority):
            return False
        size = len(root.segments)
        if self.segments[:size] != root.segments:
            return False
        return len(self.segments) > size if strict else True

    def overlaps(self, other: Location) -> bool:
        """One contains the other (or they are equal)."""
        return self.within(other) or other.within(self)

    def local_path(self) -> str:
        """The filesystem path FileIO touches for a ``file://`` location: the literal one."""
        _, rest = _split_scheme(self.raw)
        if rest.startswith("//"):
            rest = rest[2 + len(self.authority) :]
        return rest


def normalize(value: object, what: str = "location") -> Location:
    """``value`` as a :class:`Location`, or 400 naming ``what``."""
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{what} must be a non-empty string")
    if any(_bad_char(ch) for ch in value) or "?" in value or "#" in value:
        raise BadRequest(f"{what} {value!r} contains a control character, a backslash, ? or #")
    scheme, rest = _split_scheme(value)
    authority = ""
    if rest.startswith("//"):
        authority, _, path = rest[2:].partition("/")
        path = "/" + path
    else:
        path = rest
    if not path.startswith("/"):
        raise BadRequest(f"{what} {value!r} is relative; give an absolute location")
    segments: list[str] = []
    for segment in path.split("/"):
        _check_encoding(segment, value, what)
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise BadRequest(f"{what} {value!r} climbs above its root")
            segments.pop()
            continue
        segments.append(segment)
    return Location(scheme, authority, tuple(segments), value)


def catalog_root(warehouse_root: str, tenant: str, catalog: str) -> str:
    """Where a catalog keeps its files when it has no storage of its own: ``<root>/<t>/<c>``."""
    return f"{warehouse_root.rstrip('/')}/{tenant}/{catalog}"


def check_inside(
    value: object,
    roots: Sequence[str],
    what: str,
    *,
    strict: bool = True,
    resolve: bool = False,
) -> str:
    """``value`` normalized, if it lies inside one of ``roots`` (``strict``: below it, not
    equal to it; ``resolve``: also its real path, see the module docstring); else 400."""
    location = normalize(value, what)
    if not any(is_inside(location, root, strict=strict, resolve=resolve) for root in roots):
        allowed = ", ".join(f"{root.rstrip('/')}/" for root in roots)
        raise BadRequest(f"{what} {value!r} is outside {allowed}")
    return str(location)


def is_inside(
    value: str | Location, root: str | Location, *, strict: bool = True, resolve: bool = False
) -> bool:
    """The non-raising form of :func:`check_inside` for one root (a malformed path is outside)."""
    try:
        location = value if isinstance(value, Location) else normalize(value)
        base = root if isinstance(root, Location) else normalize(root, "root")
    except BadRequest:
        return False
    if not location.within(base, strict=strict):
        return False
    if resolve and location.scheme == "file":
        real = os.path.realpath(location.local_path())
        real_root = os.path.realpath(base.local_path())
        if real == real_root:
            return not strict
        return real.startswith(real_root.rstrip("/") + "/")
    return True


def _split_scheme(value: str) -> tuple[str, str]:
    match = _SCHEME.match(value)
    if match is None or value.startswith("/"):
        return "file", value
    return match.group(1).lower(), match.group(2)


def _bad_char(ch: str) -> bool:
    return ch == "\\" or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0


def _check_encoding(segment: str, value: str, what: str) -> None:
    """Refuse a segment whose percent-decoded forms another reader could see differently."""
    text = segment
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(text)
        if decoded == text:
            return
        if decoded in (".", "..") or "/" in decoded or any(_bad_char(ch) for ch in decoded):
            raise BadRequest(f"{what} {value!r} hides a path separator or dot segment in %-escapes")
        text = decoded
