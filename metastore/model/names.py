"""Name rules, checked before anything is written.

Names end up inside storage keys and index keys that use control characters as
separators (0x00 between key parts, 0x1F between namespace levels), so control
characters are refused outright. Tenant and catalog names are also path
segments and key prefixes, so they are restricted to a conservative alphabet.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from metastore.errors import InvalidName

MAX_NAME_CHARS = 255
MAX_NAMESPACE_DEPTH = 16
SYSTEM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_system_name(kind: str, name: str) -> str:
    """Tenant and catalog names: 1-128 of [A-Za-z0-9_.-], starting alphanumeric."""
    if not isinstance(name, str) or not SYSTEM_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-128 characters of A-Z a-z 0-9 _ . -"
            " starting with a letter or digit"
        )
    return name


def check_name(kind: str, name: str) -> str:
    """Namespace levels, table and view names."""
    if not isinstance(name, str) or name == "":
        raise InvalidName(f"invalid {kind} name: must be a non-empty string")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidName(f"invalid {kind} name: longer than {MAX_NAME_CHARS} characters")
    if not name.isprintable():  # a printable name holds no control character or surrogate
        _check_controls(kind, name)
    if name != name.strip():
        raise InvalidName(f"invalid {kind} name {name!r}: leading or trailing whitespace")
    return name


def _check_controls(kind: str, name: str) -> None:
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise InvalidName(
                f"invalid {kind} name {name!r}: control character U+{ord(ch):04X} not allowed"
            )


def check_namespace(levels: Sequence[str], *, allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(levels, list | tuple):
        raise InvalidName("invalid namespace: must be a list of strings")
    if not levels and not allow_empty:
        raise InvalidName("invalid namespace: must have at least one level")
    if len(levels) > MAX_NAMESPACE_DEPTH:
        raise InvalidName(f"invalid namespace: deeper than {MAX_NAMESPACE_DEPTH} levels")
    return tuple(check_name("namespace", level) for level in levels)
