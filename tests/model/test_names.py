"""Name rules: tenant/catalog names, namespace levels, table and view names."""

from __future__ import annotations

import re
from typing import Any

import pytest

from metastore.errors import BadRequest, InvalidName, MetastoreError
from metastore.model.names import (
    MAX_NAME_CHARS,
    MAX_NAMESPACE_DEPTH,
    check_name,
    check_namespace,
    check_system_name,
)

# --- tenant and catalog names ------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["acme", "a", "Z", "0", "9lives", "A1_b.c-d", "tenant.prod", "x" * 128, "a" + "_" * 127],
)
def test_valid_system_names(name: str) -> None:
    assert check_system_name("tenant", name) == name
    assert check_system_name("catalog", name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "_a",
        ".a",
        "-a",
        "a b",
        "a/b",
        "a:b",
        "a\x00",
        "a\x1f",
        "abc\n",  # `$` alone would accept a trailing newline
        "\nabc",
        "café",
        "x" * 129,
        " acme",
        "acme ",
    ],
)
def test_invalid_system_names(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid tenant name"):
        check_system_name("tenant", name)


@pytest.mark.parametrize("name", [None, 123, b"acme", ["acme"]])
def test_system_name_must_be_a_string(name: Any) -> None:
    with pytest.raises(InvalidName, match="invalid catalog name"):
        check_system_name("catalog", name)


# --- namespace levels, table and view names -----------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "sales",
        "with.dot",
        "inner space",
        "ünïcödé",
        "日本語",
        "Ελληνικά",
        "emoji🙂",
        "x" * MAX_NAME_CHARS,
        "ü" * MAX_NAME_CHARS,  # the limit counts characters, not UTF-8 bytes
        # unprintable but neither control nor surrogate: checked character by character
        "zero\u200bwidth",  # format (Cf)
        "private\ue000use",  # private use (Co)
        "in\u2028side",  # line separator (Zl) inside the name
    ],
)
def test_valid_names(name: str) -> None:
    assert check_name("table", name) == name


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("\x00", "U+0000"),
        ("a\x00b", "U+0000"),
        ("a\x1fb", "U+001F"),
        ("a\nb", "U+000A"),
        ("a\x7fb", "U+007F"),
        ("\tname", "U+0009"),
        ("a\x85", "U+0085"),  # C1 control
        ("a\ud800", "U+D800"),  # lone surrogate
        ("zero\u200bwidth\x00", "U+0000"),  # after an unprintable character that is allowed
    ],
)
def test_control_characters_refused(name: str, code: str) -> None:
    with pytest.raises(InvalidName, match=re.escape(f"control character {code} not allowed")):
        check_name("namespace", name)


def test_empty_name_refused() -> None:
    with pytest.raises(InvalidName, match="invalid view name: must be a non-empty string"):
        check_name("view", "")


def test_too_long_name_refused() -> None:
    assert MAX_NAME_CHARS == 255
    with pytest.raises(InvalidName, match="longer than 255"):
        check_name("table", "x" * 256)


@pytest.mark.parametrize("name", [" a", "a ", " a ", "a\u00a0", "\u3000a", "  "])
def test_leading_or_trailing_whitespace_refused(name: str) -> None:
    with pytest.raises(InvalidName, match="leading or trailing whitespace"):
        check_name("table", name)


@pytest.mark.parametrize("name", [None, 5, b"bytes", ["a"]])
def test_name_must_be_a_string(name: Any) -> None:
    with pytest.raises(InvalidName, match="non-empty string"):
        check_name("table", name)


# --- namespaces ---------------------------------------------------------------------


def test_valid_namespace_returns_a_tuple() -> None:
    assert check_namespace(["a", "b"]) == ("a", "b")
    assert check_namespace(("a",)) == ("a",)
    assert check_namespace(["ünï", "日本"]) == ("ünï", "日本")


def test_namespace_depth_limit() -> None:
    assert MAX_NAMESPACE_DEPTH == 16
    deepest = [f"l{i}" for i in range(16)]
    assert check_namespace(deepest) == tuple(deepest)
    with pytest.raises(InvalidName, match="deeper than 16 levels"):
        check_namespace([*deepest, "l16"])


def test_empty_namespace_refused_unless_allowed() -> None:
    with pytest.raises(InvalidName, match="at least one level"):
        check_namespace([])
    assert check_namespace([], allow_empty=True) == ()


@pytest.mark.parametrize("levels", ["a.b", "a", None, {"a"}, {"a": 1}, iter(["a"]), b"a"])
def test_namespace_must_be_a_list(levels: Any) -> None:
    with pytest.raises(InvalidName, match="must be a list of strings"):
        check_namespace(levels)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (["a", ""], "non-empty string"),
        (["a", "b\x00c"], "control character U\\+0000"),
        (["a", "b\x1f"], "control character U\\+001F"),
        ([" a"], "whitespace"),
        (["a", 1], "non-empty string"),
        (["a", "x" * 256], "longer than 255"),
    ],
)
def test_every_namespace_level_is_checked(levels: list[Any], message: str) -> None:
    with pytest.raises(InvalidName, match=message):
        check_namespace(levels)


# --- the error itself ---------------------------------------------------------------


def test_invalid_name_is_a_400() -> None:
    with pytest.raises(InvalidName) as info:
        check_name("table", "")
    err = info.value
    assert isinstance(err, BadRequest)
    assert isinstance(err, MetastoreError)
    assert err.status == 400
    assert err.to_body() == {
        "error": {
            "message": "invalid table name: must be a non-empty string",
            "type": "BadRequestException",
            "code": 400,
        }
    }
