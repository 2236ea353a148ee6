"""The values a JSON body may hold, whatever its schema: checked once, right after parsing.

A body is parsed by Python's ``json``, which accepts what other readers of the same data
cannot: a lone UTF-16 surrogate (``"\\ud800"``, or its bytes under ``surrogatepass``)
that no UTF-8 encoder writes back, so the commit holding it failed to encode after it
was accepted (a 500, and every request batched with it failed too); integers of any
size, where Iceberg's readers (and Avro) hold ids and counters in 64 or 32 bits, so a
table committed with a snapshot id of 2**63 could no longer be read by them; and
numbers written as text that pyiceberg turns into exact values, where a column
default of ``"1e10000000"`` cost seconds of CPU (holding the interpreter lock, so the
whole node) and ``"1e999999999"`` hours.

So every string (keys included) must be encodable as UTF-8; in an Iceberg REST body,
every integer must fit 64 bits, the Iceberg ids that are 32-bit (schema, spec, order
and field ids, and the last ones assigned) must fit 32 bits, a ``fixed[n]``,
``bucket[n]`` or ``truncate[n]`` needs 1 <= n < 2**31, and a column default written
as a number in text has an exponent of at most ``MAX_DEFAULT_EXPONENT`` (a decimal
holds 38 digits). Anything else is a 400 naming where it is. Most bodies cannot hold
any of it (ASCII, no ``\\u`` escape, no run of 10 digits, no default, no parameterized
type): one scan of the raw bytes says so, and only the others are walked.
"""

from __future__ import annotations

import re
from typing import Any

from metastore.errors import BadRequest

INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
# Iceberg's 32-bit ids (table and view metadata, schemas, partition specs, sort orders)
INT32_KEYS = frozenset(
    {
        "id",
        "field-id",
        "source-id",
        "element-id",
        "key-id",
        "value-id",
        "schema-id",
        "current-schema-id",
        "spec-id",
        "default-spec-id",
        "order-id",
        "default-sort-order-id",
        "last-column-id",
        "last-partition-id",
        "format-version",
    }
)
DEFAULT_KEYS = frozenset({"initial-default", "write-default"})
MAX_DEFAULT_EXPONENT = 99  # any exponent of at most two digits
_MAX_PARAMETER = 2**31 - 1
# what only a body worth walking can hold: non-ASCII bytes, a \u escape, 10 digits in a
# row (an integer past 32 bits), a default, or a parameterized type or transform
_WORTH_WALKING = re.compile(rb"[\x80-\xff]|\\u|\d{10}|-default\"|\[\s*-?\d")
_PARAMETERIZED = re.compile(r"^\s*(fixed|bucket|truncate)\s*\[\s*(-?\d+)\s*\]\s*$")
_EXPONENT = re.compile(r"[eE]\s*[+-]?(\d+)\s*$")


def check_values(raw: bytes, body: Any, iceberg: bool) -> None:
    """400 naming the first value of ``body`` (parsed from ``raw``) that it may not hold;
    ``iceberg``: an Iceberg REST body, whose numbers and types are Iceberg's (the native
    API's own bounds are its schemas')."""
    if _WORTH_WALKING.search(raw) is not None:
        _walk(body, "", iceberg)


def _walk(value: Any, where: str, iceberg: bool) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _text(key, where or "(body)")
            here = f"{where}/{key}"
            if isinstance(item, bool):
                continue
            if iceberg and isinstance(item, int) and key in INT32_KEYS:
                _bounded(item, INT32, here, "32")
            elif iceberg and isinstance(item, str) and key in DEFAULT_KEYS:
                _text(item, here)
                _default(item, here)
            else:
                _walk(item, here, iceberg)
    elif isinstance(value, list):
        for at, item in enumerate(value):
            _walk(item, f"{where}/{at}", iceberg)
    elif isinstance(value, str):
        _text(value, where)
        if iceberg:
            _parameter(value, where)
    elif iceberg and isinstance(value, int):
        _bounded(value, INT64, where, "64")


def _text(value: str, where: str) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            f"invalid request at {where or '(body)'}: the text holds a lone UTF-16 "
            "surrogate, which is not a character"
        ) from None


def _bounded(value: int, bounds: tuple[int, int], where: str, bits: str) -> None:
    low, high = bounds
    if not low <= value <= high:
        raise BadRequest(
            f"invalid request at {where or '(body)'}: {value} does not fit a {bits}-bit integer"
        )


def _parameter(value: str, where: str) -> None:
    """``fixed[n]``, ``bucket[n]``, ``truncate[n]``: n from 1 to 2**31 - 1."""
    if "[" not in value:
        return
    match = _PARAMETERIZED.match(value)
    if match is None:
        return
    digits = match.group(2)
    if not (len(digits) <= 11 and 1 <= int(digits) <= _MAX_PARAMETER):
        raise BadRequest(
            f"invalid request at {where}: {match.group(1)}[n] needs n from 1 to {_MAX_PARAMETER}"
        )


def _default(value: str, where: str) -> None:
    """A column default in text whose exponent makes an exact value of millions of digits."""
    match = _EXPONENT.search(value)
    digits = match.group(1).lstrip("0") if match is not None else ""
    if len(digits) > len(str(MAX_DEFAULT_EXPONENT)):
        raise BadRequest(
            f"invalid request at {where}: {value[:40]!r} is out of range for a column "
            f"default (exponent past {MAX_DEFAULT_EXPONENT})"
        )
