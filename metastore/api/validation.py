"""Request bodies: size-limited, strictly parsed JSON checked against schemas/api.

Everything a handler gets has passed here, so handlers never see malformed
JSON, NaN/Infinity, a non-object top level, unknown fields or wrong types.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from aiohttp import web
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from metastore.api.typedefs import CONFIG
from metastore.errors import BadRequest, PayloadTooLarge, ValidationFailed
from metastore.resources import schemas_dir

_BASE = "https://metastore.local/schemas/api/"


@cache
def _validators() -> dict[str, Draft202012Validator]:
    directory = schemas_dir() / "api"
    schemas = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}
    registry: Registry = Registry().with_resources(
        (_BASE + f"{name}.json", Resource.from_contents(schema)) for name, schema in schemas.items()
    )
    validators = {}
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        validators[name] = Draft202012Validator(schema, registry=registry)
    return validators


def validator(name: str) -> Draft202012Validator:
    return _validators()[name]


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


async def read_json(request: web.Request, schema: str) -> dict[str, Any]:
    limit = request.app[CONFIG].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"request body of {request.content_length} bytes exceeds {limit} bytes"
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes") from None
    if not raw:
        raise BadRequest("request body is empty; a JSON object is required")
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise BadRequest("malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the JSON body must be an object")
    errors = sorted(validator(schema).iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(body)"
        raise ValidationFailed(f"invalid request at {where}: {first.message}")
    return body
