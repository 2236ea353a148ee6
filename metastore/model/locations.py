"""Storage locations: one normalizer and one containment rule for every path the server handles.

A table's or view's location, every path inside its metadata, and every file the
server reads, writes or deletes for it pass through here, on both APIs, so that
"inside" means the same thing everywhere:

- **Normalized, then compared by segments.** ``.`` segments and duplicate slashes
  are dropped, ``..`` is resolved textually (refused if it climbs above the path's
  root), the scheme is lower-cased, and a bare absolute path means ``file://``.
  Containment compares whole segments, never string prefixes, so ``.../t`` does
  not contain ``.../t2``.
- **Every reading must agree.** Readers differ on percent-encoding: pyiceberg's
  FileIO keeps ``%2e%2e`` and ``%2F`` literally, a reader that decodes the URI sees
  ``..`` and ``/``. So a path has two readings, the literal one and the fully
  decoded one, and it is inside a root only if both are. A *location* (stored,
  indexed, and the parent of files others write) must not be ambiguous at all: a
  segment that decodes to ``.``, ``..`` or something with a slash is a 400. A *file*
  path (a manifest list, a data file) may be, as long as both readings stay inside:
  Java writers percent-encode partition values, so ``region=a%2Fb`` is legitimate.
- **Refused outright:** control characters and backslashes (in either reading),
  a literal ``?`` or ``#`` (URI parsers cut them off), relative paths (FileIO resolves them
  against the server's working directory), escapes still changing after 4 rounds.
- **Symlinks** (``file://`` only, with ``resolve=True``): the real path of what the
  operating system would touch (the literal path, through ``real_path``) must also
  stay inside the real path of the root. Only paths the server acts on need this;
  it touches the filesystem, so callers run it off the event loop. A root (a table's
  location) must itself be where its name says, with no link below its catalog's
  storage root (``linked_below``), or containment in it means nothing.

The allowed roots are always passed in (a catalog's list), never read from the
node's configuration here: where a catalog may keep files is the caller's policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from metastore.errors import BadRequest
from metastore.util.real_paths import real_path

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_DECODE_ROUNDS = 4  # %252e -> %2e -> . : decode until stable, at most this often


@dataclass(frozen=True, slots=True)
class Location:
    """A normalized location: ``scheme://authority/seg/seg`` in its literal and decoded
    readings; ``raw`` is what was given."""

    scheme: str
    authority: str
    segments: tuple[str, ...]  # the literal reading
    decoded: tuple[str, ...]  # the percent-decoded reading
    raw: str

    def __str__(self) -> str:
        return self._text(self.segments)

    @property
    def key(self) -> str:
        """The decoded reading as text: two locations that any reader could confuse
        have the same key (for indexing locations)."""
        return self._text(self.decoded)

    def _text(self, segments: tuple[str, ...]) -> str:
        return f"{self.scheme}://{self.authority}/" + "/".join(segments)

    def within(self, root: Location, *, allow_equal: bool = True) -> bool:
        """Equal to ``root`` (if ``allow_equal``) or below it, in both readings."""
        if (self.scheme, self.authority) != (root.scheme, root.authority):
            return False
        return _below(self.segments, root.segments, allow_equal) and _below(
            self.decoded, root.decoded, allow_equal
        )

    def local_path(self) -> str:
        """The filesystem path FileIO touches for a ``file://`` location: the literal one."""
        _, rest = _split_scheme(self.raw)
        if rest.startswith("//"):
            rest = rest[2 + len(self.authority) :]
        return rest


def normalize(value: object, what: str = "location", *, file: bool = False) -> Location:
    """``value`` as a :class:`Location`, or 400 naming ``what``.

    ``file``: a file path, which may be percent-ambiguous (see the module docstring).
    A pure function of ``value`` and ``file`` (``what`` only names the value in a
    refusal), so the last ``NORMALIZED`` readings are kept: a table's commit reads the
    same few locations several times, under different names (a refusal is never kept;
    it is worked out again).
    """
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{what} must be a non-empty string")
    key = (value, file)
    found = _READINGS.get(key)
    if found is None:
        found = _normalized(value, what, file)
        if len(value) <= NORMALIZED_CHARS:
            if len(_READINGS) >= NORMALIZED:
                _READINGS.clear()  # a commit's few locations are read again at once
            _READINGS[key] = found
    return found


NORMALIZED = 4096  # locations whose readings are kept ...
NORMALIZED_CHARS = 1024  # ... when at most this long (a few MiB in all)
_READINGS: dict[tuple[str, bool], Location] = {}  # each get and set is atomic: no lock
# a control character (C0, DEL, C1) or a backslash, in one scan of the text
_BAD_CHARS = re.compile(r"[\\\x00-\x1f\x7f-\x9f]")


def _normalized(value: str, what: str, file: bool) -> Location:
    if _BAD_CHARS.search(value) or "?" in value or "#" in value:
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
    decoded_path = _decode(path, value, what)
    if not file and any(_hides_structure(segment, value, what) for segment in path.split("/")):
        raise BadRequest(f"{what} {value!r} hides a path separator or dot segment in %-escapes")
    return Location(
        scheme,
        authority,
        _resolve(path, value, what),
        _resolve(decoded_path, value, what),
        value,
    )


def local_file_path(location: str) -> str | None:
    """The path on this machine's file system that ``location`` names (``file://``,
    ``file:`` or a bare absolute path), None for any other storage; what the node opens
    itself rather than through a FileIO."""
    if location.startswith("/"):
        return location
    if not location.startswith("file:"):
        return None
    parsed = normalize(location, "file location", file=True)
    return parsed.local_path() if parsed.scheme == "file" and not parsed.authority else None


def catalog_root(warehouse_root: str, tenant: str, catalog: str) -> str:
    """The root a node seeds a catalog's storage with: ``<warehouse root>/<t>/<c>``."""
    return f"{warehouse_root.rstrip('/')}/{tenant}/{catalog}"


def check_inside(
    value: object,
    roots: Sequence[str],
    what: str,
    *,
    allow_equal: bool = False,
    file: bool = False,
    resolve: bool = False,
) -> str:
    """``value`` normalized, if it lies below one of ``roots`` (or is one, with
    ``allow_equal``; ``file``: a file path; ``resolve``: also its real path, see the
    module docstring); else 400."""
    location = normalize(value, what, file=file)
    if not any(
        is_inside(location, root, allow_equal=allow_equal, resolve=resolve) for root in roots
    ):
        allowed = ", ".join(f"{root.rstrip('/')}/" for root in roots)
        raise BadRequest(f"{what} {value!r} is outside {allowed}")
    return str(location)


def is_inside(
    value: str | Location,
    root: str | Location,
    *,
    allow_equal: bool = False,
    resolve: bool = False,
) -> bool:
    """Whether ``value`` (a file path, unless already normalized) lies below ``root``;
    the non-raising form of :func:`check_inside` (a malformed path is outside)."""
    try:
        location = value if isinstance(value, Location) else normalize(value, file=True)
        base = root if isinstance(root, Location) else normalize(root, "root")
    except BadRequest:
        return False
    if not location.within(base, allow_equal=allow_equal):
        return False
    if resolve and location.scheme == "file":
        real = real_path(location.local_path())
        real_root = real_path(base.local_path())
        if real == real_root:
            return allow_equal
        return real.startswith(real_root.rstrip("/") + "/")
    return True


def linked_below(value: str | Location, roots: Sequence[str]) -> bool:
    """Whether a ``file://`` location is reached through a symbolic link below the root
    of ``roots`` that holds it (by name): its real path is not that root's real path
    followed by its own segments. Without such a root, any link on its path counts.

    ``is_inside(resolve=True)`` compares a file's real path with its root's real path,
    so it holds only while the root (a table's location) is itself where its name says.
    A client that may write in its own table's folder may also put a link there, and a
    table created through it (or a folder swapped for one) has, by its real path,
    another table's (another tenant's) folder as its own: every containment check
    passed, and a purge or a maintenance run deleted that table's files. A catalog's
    storage root is the operator's: links at it or above it (a mounted volume) are
    trusted. Touches the filesystem: call it off the event loop.
    """
    try:
        location = value if isinstance(value, Location) else normalize(value)
    except BadRequest:
        return True
    if location.scheme != "file":
        return False
    real = real_path(location.local_path()).rstrip("/")
    for root in roots:
        try:
            base = normalize(root, "root")
        except BadRequest:
            continue
        if location.within(base, allow_equal=True):
            rest = location.segments[len(base.segments) :]
            expected = "/".join((real_path(base.local_path()).rstrip("/"), *rest))
            return real != expected
    return real != "/" + "/".join(location.segments)


def _below(segments: tuple[str, ...], root: tuple[str, ...], allow_equal: bool) -> bool:
    if segments[: len(root)] != root:
        return False
    return allow_equal or len(segments) > len(root)


def _split_scheme(value: str) -> tuple[str, str]:
    match = _SCHEME.match(value)
    if match is None or value.startswith("/"):
        return "file", value
    return match.group(1).lower(), match.group(2)


def _decode(text: str, value: str, what: str) -> str:
    """``text`` percent-decoded until stable; 400 if that hides a forbidden character."""
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(text)
        if decoded == text:
            return text
        if _BAD_CHARS.search(decoded):
            raise BadRequest(f"{what} {value!r} hides a control character or backslash")
        text = decoded
    raise BadRequest(f"{what} {value!r} nests %-escapes too deeply")


def _hides_structure(segment: str, value: str, what: str) -> bool:
    """The decoded reading of ``segment`` is a dot segment or holds a slash; it is not."""
    decoded = _decode(segment, value, what)
    return decoded != segment and (decoded in (".", "..") or "/" in decoded)


def _resolve(path: str, value: str, what: str) -> tuple[str, ...]:
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise BadRequest(f"{what} {value!r} climbs above its root")
            segments.pop()
            continue
        segments.append(segment)
    return tuple(segments)
