"""The Iceberg REST Catalog specification, narrowed to what this node implements.

The node ships Apache Iceberg's own OpenAPI document (``schemas/iceberg``, with its
license and notice) and serves it with only the operations the app registers: a
client or a code generator reading it sees exactly what it may call here, in the
specification's own words. Everything else of the document (schemas, responses,
parameters, the license) is kept as published; unused components are harmless.
A GET route answers HEAD too (aiohttp's twin), so the specification's HEAD
operations on such paths are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

import yaml

from metastore.http.openapi import METHODS, Operation, normalized
from metastore.util.resources import schemas_dir

SPEC = "rest-catalog-open-api.yaml"
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@cache
def upstream_text() -> str:
    return (schemas_dir() / "iceberg" / SPEC).read_text()


def upstream() -> dict[str, Any]:
    """The published document, parsed (a fresh copy on every call: callers change it).
    Its status codes are bare YAML integers (``200:``); OpenAPI keys are strings, so
    every key is read as one."""
    document: dict[str, Any] = _string_keys(yaml.load(upstream_text(), Loader=_Loader))
    return document


def _string_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _string_keys(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_string_keys(item) for item in node]
    return node


def implemented(registered: Iterable[Operation]) -> dict[str, Any]:
    """The published document with only the ``registered`` operations in its paths."""
    served: set[tuple[str, str]] = set()
    for operation in registered:
        served.add((operation.method, normalized(operation.path)))
        if operation.method == "get":
            served.add(("head", normalized(operation.path)))
    document = upstream()
    paths: dict[str, Any] = {}
    for path, item in document.get("paths", {}).items():
        kept = {
            key: value
            for key, value in item.items()
            if key not in METHODS or (key, normalized(path)) in served
        }
        if any(key in METHODS for key in kept):
            paths[path] = kept
    document["paths"] = paths
    info = document.setdefault("info", {})
    info["description"] = (
        f"{info.get('description', '')} This document is Apache Iceberg's specification "
        "narrowed to the operations this metastore node implements."
    ).strip()
    return document


def described(document: dict[str, Any]) -> set[tuple[str, str]]:
    """(method, normalized path) of every operation ``document`` describes."""
    return {
        (method, normalized(path))
        for path, item in document.get("paths", {}).items()
        for method in item
        if method in METHODS
    }


def render(document: dict[str, Any]) -> str:
    """YAML, under the license header of the published file."""
    header = []
    for line in upstream_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return "\n".join(header) + "\n\n---\n" + body
