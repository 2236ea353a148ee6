"""A request schema compiled to one plain-Python check that accepts valid bodies fast.

Checking a small body with ``jsonschema`` walks the schema through its generic
machinery (a validator per subschema, an iterator per keyword) on every request: a
sizeable share of a small commit's CPU. Most of our request schemas use a handful of
keywords whose meaning is simple (types, properties, lengths, bounds, string enums);
``compile_accept`` turns such a schema into nested closures that answer only "valid
or not". A schema with any other keyword (``oneOf``, ``if``, a recursive ``$ref``,
...) is not compiled: None, and the caller checks with ``jsonschema`` as before.

The check is used only to accept: a body it rejects is checked again by
``jsonschema``, whose first error is what the client reads, so every error message
stays the same. Each keyword below is implemented exactly as ``jsonschema`` (Draft
2020-12) applies it: only to instances of its type (``maxLength`` ignores a number),
integers include floats with an integral value and exclude booleans, ``pattern`` is
``re.search``. The tests compare both on generated bodies for every schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

Accept = Callable[[Any], bool]

# keywords that never make an instance invalid (annotations, and the definitions the
# references were inlined from)
_ANNOTATIONS = frozenset(
    {"title", "description", "$schema", "$id", "$comment", "$defs", "default", "examples"}
)
_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "maxProperties",
    }
)
_TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER
# the types ``jsonschema`` also tells by ``isinstance`` alone (bool: True is not an integer)
_PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "object": dict,
    "array": list,
    "boolean": bool,
    "null": type(None),
}
_CHECKED_TYPES = frozenset({"integer", "number"})  # by ``jsonschema``'s own type checker


class _Unsupported(Exception):
    """A keyword or value this compiler does not implement: use ``jsonschema``."""


def compile_accept(schema: Any) -> Accept | None:
    """A check equivalent to ``schema``'s validity, or None if the schema uses anything
    this module does not implement."""
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _compile(node: Any) -> Accept:
    if node is True:
        return lambda _: True
    if node is False:
        return lambda _: False
    if not isinstance(node, Mapping):
        raise _Unsupported(node)
    unknown = set(node) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise _Unsupported(unknown)
    checks: list[Accept] = []
    if "type" in node:
        checks.append(_type(node["type"]))
    if "enum" in node:
        checks.append(_one_of_strings(node["enum"]))
    if "const" in node:
        checks.append(_one_of_strings([node["const"]]))
    checks += _string(node)
    checks += _number(node)
    checks += _array(node)
    checks += _object(node)
    return _all(checks)


def _all(checks: list[Accept]) -> Accept:
    if not checks:
        return lambda _: True
    if len(checks) == 1:
        return checks[0]
    every = tuple(checks)
    return lambda value: all(check(value) for check in every)


def _type(names: Any) -> Accept:
    listed = names if isinstance(names, list) else [names]
    if not listed or not all(isinstance(name, str) for name in listed):
        raise _Unsupported(names)
    if all(name in _PYTHON_TYPES for name in listed):
        exact = tuple(_PYTHON_TYPES[name] for name in listed)
        return lambda value: isinstance(value, exact)
    if not all(name in _PYTHON_TYPES or name in _CHECKED_TYPES for name in listed):
        raise _Unsupported(names)
    return lambda value: any(_TYPE_CHECKER.is_type(value, name) for name in listed)


def _one_of_strings(values: Any) -> Accept:
    """``enum``/``const`` of strings only: equal as strings (``jsonschema`` compares other
    values by its own rules, e.g. ``1`` is not ``true``; those are not compiled)."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _Unsupported(values)
    allowed = frozenset(values)
    return lambda value: isinstance(value, str) and value in allowed


def _int_bound(node: Mapping[str, Any], keyword: str) -> int | None:
    bound = node.get(keyword)
    if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool)):
        raise _Unsupported(keyword)
    return bound


def _string(node: Mapping[str, Any]) -> list[Accept]:
    low, high = _int_bound(node, "minLength"), _int_bound(node, "maxLength")
    pattern = node.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise _Unsupported(pattern)
    if low is None and high is None and pattern is None:
        return []
    search = re.compile(pattern).search if pattern is not None else None
    least = low if low is not None else 0

    def check(value: Any) -> bool:
        if not isinstance(value, str):
            return True
        if len(value) < least or (high is not None and len(value) > high):
            return False
        return search is None or search(value) is not None

    return [check]


def _number(node: Mapping[str, Any]) -> list[Accept]:
    low, high = node.get("minimum"), node.get("maximum")
    for bound in (low, high):
        if bound is not None and (not isinstance(bound, int | float) or isinstance(bound, bool)):
            raise _Unsupported(bound)
    if low is None and high is None:
        return []

    def check(value: Any) -> bool:
        if not _TYPE_CHECKER.is_type(value, "number"):
            return True
        return (low is None or value >= low) and (high is None or value <= high)

    return [check]


def _array(node: Mapping[str, Any]) -> list[Accept]:
    low, high = _int_bound(node, "minItems"), _int_bound(node, "maxItems")
    item = _compile(node["items"]) if "items" in node else None
    unique = node.get("uniqueItems", False)
    if not isinstance(unique, bool):
        raise _Unsupported(unique)
    if low is None and high is None and item is None and not unique:
        return []
    least = low if low is not None else 0

    def check(value: Any) -> bool:
        if not isinstance(value, list):
            return True
        if len(value) < least or (high is not None and len(value) > high):
            return False
        if unique and not _unique_strings(value):
            return False  # or unique by ``jsonschema``'s rules: it decides
        return item is None or all(item(each) for each in value)

    return [check]


def _unique_strings(values: list[Any]) -> bool:
    """Strings all different (anything else is left to ``jsonschema``: False)."""
    return all(isinstance(v, str) for v in values) and len(set(values)) == len(values)


def _object(node: Mapping[str, Any]) -> list[Accept]:
    properties = node.get("properties", {})
    if not isinstance(properties, Mapping):
        raise _Unsupported(properties)
    named = {name: _compile(sub) for name, sub in properties.items()}
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise _Unsupported(required)
    extra_schema = node.get("additionalProperties", True)
    extra = _compile(extra_schema)
    no_extras = extra_schema is False
    any_extra = extra_schema is True
    names = _compile(node["propertyNames"]) if "propertyNames" in node else None
    most = _int_bound(node, "maxProperties")
    if not named and not required and any_extra and names is None and most is None:
        return []
    must = tuple(required)

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if most is not None and len(value) > most:
            return False
        for name in must:
            if name not in value:
                return False
        for name, item in value.items():
            sub = named.get(name)
            if sub is not None:
                if not sub(item):
                    return False
            elif no_extras or not (any_extra or extra(item)):
                return False
            if names is not None and not names(name):
                return False
        return True

    return [check]
