"""The fast acceptance checks of the request schemas agree with ``jsonschema``.

Every request schema that compiles is checked on bodies generated from the schema
itself (mostly near-valid: the bounds of every length and number, missing required
keys, extra keys, wrong types, booleans where numbers go), so a check that accepted
what ``jsonschema`` refuses, or the other way round, fails here.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from metastore.errors import ValidationFailed
from metastore.http.accept import compile_accept
from metastore.http.validation import parse_json, validator
from metastore.util.resources import schemas_dir

# every body's schema ("defs" only holds the definitions the others refer to)
SCHEMAS = sorted(p.stem for p in (schemas_dir() / "api").glob("*.json") if p.stem != "defs")
SAMPLES = 400


def _any(rng: random.Random, depth: int) -> Any:
    choices: list[Any] = [None, True, False, 0, -1, 1.0, 1.5, "", "x", "é" * 3]
    if depth < 2:
        choices += [[_any(rng, depth + 1)], {"k": _any(rng, depth + 1)}]
    return rng.choice(choices)


def _string(rng: random.Random, node: dict[str, Any]) -> str:
    if "enum" in node and rng.random() < 0.7:
        return str(rng.choice(node["enum"]))
    if "const" in node and rng.random() < 0.7:
        return str(node["const"])
    low, high = node.get("minLength", 0), node.get("maxLength", 8)
    length = rng.randint(low, min(high, low + 6))  # mostly valid, else at a bound
    if rng.random() < 0.2:
        length = rng.choice([0, 1, low, max(low - 1, 0), high, high + 1])
    head = "".join(rng.choice("ab1-_.é/ ") for _ in range(min(length, 8)))
    return head + "a" * (length - len(head))


def _number(rng: random.Random, node: dict[str, Any]) -> Any:
    low, high = node.get("minimum", -5), node.get("maximum", 5)
    return rng.choice([low, low - 1, high, high + 1, 0, 2.0, 2.5, True, False])


def _instance(rng: random.Random, node: Any, depth: int = 0) -> Any:
    """A body near ``node``'s valid ones: mostly of its types, sometimes off."""
    if not isinstance(node, dict) or rng.random() < 0.05 or depth > 6:
        return _any(rng, depth)
    if "enum" in node and rng.random() < 0.5:
        return rng.choice(node["enum"])
    if "const" in node and rng.random() < 0.5:
        return node["const"]
    types = node.get("type", rng.choice(["object", "array", "string", "integer"]))
    kind = rng.choice(types if isinstance(types, list) else [types])
    if kind == "object":
        body: dict[str, Any] = {}
        for name, sub in node.get("properties", {}).items():
            if (name in node.get("required", []) and rng.random() < 0.95) or rng.random() < 0.5:
                body[name] = _instance(rng, sub, depth + 1)
        extra = node.get("additionalProperties", True)
        if rng.random() < 0.3 or (isinstance(extra, dict) and rng.random() < 0.7):
            names = node.get("propertyNames", {})
            key = _string(rng, names) if isinstance(names, dict) else "extra"
            body[key] = _instance(rng, extra if isinstance(extra, dict) else {}, depth + 1)
        return body
    if kind == "array":
        low, high = node.get("minItems", 0), node.get("maxItems", 3)
        count = rng.randint(low, max(low, min(high, 3)))
        if rng.random() < 0.2:
            count = rng.choice([0, max(low - 1, 0), high + 1])
        return [_instance(rng, node.get("items", {}), depth + 1) for _ in range(min(count, 40))]
    if kind == "string":
        return _string(rng, node)
    if kind in ("integer", "number"):
        return _number(rng, node)
    if kind == "boolean":
        return rng.choice([True, False, 0])
    return rng.choice([None, 0, ""])


@pytest.mark.parametrize("name", SCHEMAS)
def test_the_check_agrees_with_jsonschema(name: str) -> None:
    schema = validator(name)
    accept = compile_accept(schema.schema)
    if accept is None:
        pytest.skip(f"{name} uses keywords the fast check leaves to jsonschema")
    rng = random.Random(name)
    seen = {True: 0, False: 0}
    for _ in range(SAMPLES):
        body = _instance(rng, schema.schema)
        valid = schema.is_valid(body)
        assert accept(body) is valid, (name, body)
        seen[valid] += 1
    assert seen[True] and seen[False], f"{name}: generated only one outcome {seen}"


@pytest.mark.parametrize(
    ("schema", "value", "valid"),
    [
        ({"type": "integer"}, 1.0, True),  # an integral float is an integer
        ({"type": "integer"}, 1.5, False),
        ({"type": "integer"}, True, False),  # a boolean is not
        ({"type": "number"}, False, False),
        ({"type": "boolean"}, 0, False),
        ({"type": ["string", "null"]}, None, True),
        ({"maxLength": 1}, 12, True),  # string keywords ignore other types
        ({"minimum": 3}, "2", True),
        ({"minimum": 3}, True, True),  # a boolean is not a number: no bound applies
        ({"maxLength": 2}, "éé", True),  # characters, not bytes
        ({"pattern": "b"}, "abc", True),  # a search, not a full match
        ({"enum": ["a"]}, ["a"], False),
        ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1, "b": 2}, False),
        ({"additionalProperties": {"type": "string"}}, {"b": 2}, False),
        ({"propertyNames": {"maxLength": 1}}, {"ab": 1}, False),
        ({"maxProperties": 1}, {"a": 1, "b": 2}, False),
        ({"required": ["a"]}, [], True),  # object keywords ignore arrays
        ({"items": {"type": "string"}, "maxItems": 2}, ["a", 1], False),
        ({"uniqueItems": True}, ["a", "b"], True),
        ({"uniqueItems": True}, ["a", "a"], False),
    ],
)
def test_keyword_edges(schema: dict[str, Any], value: Any, valid: bool) -> None:
    from jsonschema import Draft202012Validator

    accept = compile_accept(schema)
    assert accept is not None
    assert Draft202012Validator(schema).is_valid(value) is valid
    assert accept(value) is valid


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}]},
        {"$ref": "#/x"},
        {"enum": [1, True]},  # jsonschema's own equality, not Python's
        {"patternProperties": {"a": {}}},
        {"format": "uri"},
        {"properties": {"a": {"uniqueItems": 1}}},
    ],
)
def test_anything_else_is_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert compile_accept(schema) is None


def test_a_refused_body_still_gets_jsonschemas_message() -> None:
    with pytest.raises(ValidationFailed, match=r"invalid request at name: 1 is not of type"):
        parse_json(b'{"name": 1}', "create_entity")
    with pytest.raises(ValidationFailed, match=r"'name' is a required property"):
        parse_json(b'{"properties": {}}', "create_entity")
