"""The native API's OpenAPI 3.1 document, built from the app's own route table and schemas.

Nothing here is written by hand per route, so the document cannot drift from the
server: every route the app registers is an operation (path parameters from its
template), and an operation's request body is the JSON Schema in ``schemas/api``
its handler validates with (``metastore.http.validation.read_json``), found in the
handler's own code: a schema name passed to a call that reads the body (a literal,
or a module constant). A body read only when one was sent is optional; a route
whose handler reads no schema is described without a body. The schemas are the
ones the server validates with, copied into ``components/schemas`` with their
references rewritten to point there: one source of truth.

Routes the Iceberg REST specification describes (``metastore.http.iceberg_spec``) are
left to that document; a route it does not describe (the node's own extensions under
``/v1``) is described here like any other. aiohttp's HEAD twin of a GET route is
the GET operation's (HTTP says so); an explicitly registered HEAD is its own.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import re
import textwrap
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from aiohttp import web

from metastore import __version__
from metastore.util.resources import schemas_dir

OPENAPI_VERSION = "3.1.0"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ANY_METHOD = ("get", "put", "post", "delete", "patch")  # what a "*" route answers
OUR_CODE = "metastore."  # request_schemas follows calls into these modules only
MAX_SCANNED = 64  # functions one handler's scan reads at most
_PARAMETER = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")

ERROR_SCHEMA = {
    "type": "object",
    "description": "every error: Iceberg's error model",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": "integer", "minimum": 400, "maximum": 599},
            },
        }
    },
}


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of the app as the documents see it."""

    method: str  # lower case
    path: str  # the OpenAPI path template, e.g. /api/v1/tenants/{tenant}
    handler: Callable[..., Any]


def openapi_path(resource: web.AbstractResource) -> str:
    """The route's template with its parameters' patterns dropped; a static directory is
    ``<prefix>/{filename}``."""
    if isinstance(resource, web.StaticResource):
        return resource.canonical.rstrip("/") + "/{filename}"
    return _PARAMETER.sub(lambda m: "{" + m[1] + "}", resource.canonical)


def operations(app: web.Application) -> Iterator[Operation]:
    """Every route of ``app`` once, aiohttp's HEAD twins of GET routes left out."""
    gets = {
        (route.resource, route.handler)
        for route in app.router.routes()
        if route.method == "GET" and route.resource is not None
    }
    for route in app.router.routes():
        resource = route.resource
        if resource is None:
            continue
        if route.method == "HEAD" and (resource, route.handler) in gets:
            continue
        methods = ANY_METHOD if route.method == "*" else (route.method.lower(),)
        for method in methods:
            yield Operation(method, openapi_path(resource), route.handler)


def native_document(
    app: web.Application, described_elsewhere: Collection[tuple[str, str]]
) -> dict[str, Any]:
    """The OpenAPI document of every operation of ``app`` but those in
    ``described_elsewhere`` ((method, normalized path) pairs: the Iceberg document's)."""
    paths: dict[str, dict[str, Any]] = {}
    used: set[str] = set()
    ids: set[str] = set()
    for operation in operations(app):
        if (operation.method, normalized(operation.path)) in described_elsewhere:
            continue
        item = paths.setdefault(operation.path, {})
        described = _describe(operation, ids)
        body = request_schemas(operation.handler)
        if body:
            used |= body.keys()
            refs = [{"$ref": f"#/components/schemas/{name}"} for name in sorted(body)]
            item_schema = refs[0] if len(refs) == 1 else {"oneOf": refs}
            described["requestBody"] = {
                "required": all(body.values()),
                "content": {"application/json": {"schema": item_schema}},
            }
        item[operation.method] = described
    schemas = dict(component_schemas())
    schemas["Error"] = ERROR_SCHEMA
    return {
        "openapi": OPENAPI_VERSION,
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "metastore native API",
            "version": __version__,
            "description": "Tenants, catalogs, the commit history, principals, grants and "
            "operations. The Iceberg REST Catalog API this node implements is described "
            "at /v1/openapi.yaml.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


def normalized(path: str) -> str:
    """``path`` with every parameter name blanked: templates that match the same URLs
    compare equal whatever their parameters are called."""
    return _PARAMETER.sub("{}", path)


def _describe(operation: Operation, ids: set[str]) -> dict[str, Any]:
    handler = inspect.unwrap(operation.handler)
    name = getattr(handler, "__name__", "handler")
    module = getattr(handler, "__module__", "") or ""
    tag = module.rsplit(".", 1)[-1] or "metastore"
    operation_id = f"{tag}.{name}.{operation.method}"
    while operation_id in ids:  # one handler on several routes
        operation_id += "_"
    ids.add(operation_id)
    doc = inspect.getdoc(handler) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    described: dict[str, Any] = {
        "operationId": operation_id,
        "tags": [tag],
        "summary": summary or f"{operation.method.upper()} {operation.path}",
        "responses": {
            "2XX": {"description": "success"},
            "default": {
                "description": "an error, in the Iceberg error shape",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
    parameters = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
        for p in _PARAMETER.findall(operation.path)
    ]
    if parameters:
        described["parameters"] = parameters
    return described


# --- the request schemas a handler validates with -------------------------------------------


@cache
def schema_names() -> frozenset[str]:
    return frozenset(p.stem for p in (schemas_dir() / "api").glob("*.json"))


def request_schemas(handler: Callable[..., Any]) -> dict[str, bool]:
    """Schema name -> whether the body is required, for every schema ``handler`` reads
    its body with: a name passed to a call whose callee names a body or JSON read
    (``read_json``, ``_optional_body``), in the handler or in the functions of ours it
    calls (a shared helper, the wrapper of a route's twin); required only when read
    unconditionally by ``read_json`` itself."""
    found: dict[str, bool] = {}
    _scan(inspect.unwrap(handler), False, found, set())
    return found


def _scan(
    function: Callable[..., Any], conditional: bool, found: dict[str, bool], seen: set[int]
) -> None:
    if id(function) in seen or len(seen) > MAX_SCANNED:
        return
    seen.add(id(function))
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):  # built in, or aiohttp's own
        return
    names = schema_names()
    scope = _scope(function)

    def visit(node: ast.AST, conditional: bool) -> None:
        if isinstance(node, ast.Call):
            callee = _callee(node.func)
            if "json" in callee or "body" in callee:
                for arg in node.args:
                    name = _schema_argument(arg, scope, names)
                    if name is not None:
                        required = callee == "read_json" and not conditional
                        found[name] = found.get(name, False) or required
            target = scope.get(callee) if isinstance(node.func, ast.Name) else None
            if inspect.isfunction(target) and target.__module__.startswith(OUR_CODE):
                _scan(inspect.unwrap(target), conditional, found, seen)
        inner = conditional or isinstance(node, ast.If | ast.IfExp | ast.Try)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, conditional)


def _scope(function: Callable[..., Any]) -> dict[str, Any]:
    """The names ``function`` sees: its module's globals and its closure's variables."""
    scope = dict(getattr(function, "__globals__", {}))
    with contextlib.suppress(TypeError, ValueError):  # not a Python function
        scope |= inspect.getclosurevars(function).nonlocals
    return scope


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _schema_argument(arg: ast.expr, constants: dict[str, Any], names: frozenset[str]) -> str | None:
    value: Any = None
    if isinstance(arg, ast.Constant):
        value = arg.value
    elif isinstance(arg, ast.Name):
        value = constants.get(arg.id)
    return value if isinstance(value, str) and value in names else None


# --- the schemas, as components -------------------------------------------------------------


@cache
def component_schemas() -> dict[str, Any]:
    """Every schema of ``schemas/api`` by name, its ``$ref``s pointing into the document."""
    directory = schemas_dir() / "api"
    schemas = {}
    for path in sorted(directory.glob("*.json")):
        schema = json.loads(path.read_text())
        schema.pop("$id", None)
        schema.pop("$schema", None)
        schemas[path.stem] = _rewrite(schema, path.stem)
    return schemas


def _rewrite(node: Any, owner: str) -> Any:
    if isinstance(node, dict):
        return {k: _ref(v, owner) if k == "$ref" else _rewrite(v, owner) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite(item, owner) for item in node]
    return node


def _ref(ref: str, owner: str) -> str:
    """``#/$defs/x`` (this schema's) or ``other.json#/...`` as a pointer into components."""
    target, _, fragment = ref.partition("#")
    name = target.removesuffix(".json") if target else owner
    return f"#/components/schemas/{name}{fragment}"
