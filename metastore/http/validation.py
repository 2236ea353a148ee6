"""Request bodies: size-limited, strictly parsed JSON checked against schemas/api.

Everything a handler gets has passed here, so handlers never see malformed
JSON, NaN/Infinity, a non-object top level, unknown fields or wrong types.

A body is received once (``receive``, by the ``read_body`` middleware) within a
deadline, so a client that trickles its body cannot hold a request open, and
kept in the request. Parsing and checking a large body takes a thread, not the
event loop: a few near-limit bodies would otherwise stall every other request,
``/health`` included, for as long as they take.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from aiohttp import hdrs, web
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from metastore.errors import BadRequest, PayloadTooLarge, ValidationFailed
from metastore.http import body_coding
from metastore.http.accept import Accept, compile_accept
from metastore.http.json_values import check_values
from metastore.util.resources import schemas_dir

_BASE = "https://metastore.local/schemas/api/"
BODY = web.RequestKey("body", bytes)  # the body, once ``receive`` has read and decoded it
PARSED = web.RequestKey("parsed-body", tuple)  # (schema, body) of the last ``read_json``
OFF_LOOP_BYTES = 64 * 1024  # bodies past this are parsed and checked in a worker thread
R = TypeVar("R")


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
        inlined = _inline(schemas, f"{name}.json", schema, ())
        validators[name] = Draft202012Validator(inlined, registry=registry)
    return validators


def _inline(
    documents: dict[str, Any], document: str, node: Any, seen: tuple[tuple[str, str], ...]
) -> Any:
    """``node`` (of ``document``) with every ``$ref`` replaced by the schema it names.

    Checking a body then never resolves a reference: the validator would look each one
    up in the registry on every request, a sizeable share of a small request's CPU. A
    reference that would recurse into itself stays a reference, made absolute, and the
    registry resolves it as before; the checks are the same either way.
    """
    if isinstance(node, list):
        return [_inline(documents, document, item, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) == 1:
        target_doc, _, pointer = ref.partition("#")
        target_doc = target_doc or document
        if (target_doc, pointer) in seen or target_doc not in {f"{n}.json" for n in documents}:
            return {"$ref": _BASE + target_doc + "#" + pointer}
        target: Any = documents[target_doc.removesuffix(".json")]
        for part in filter(None, pointer.split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return _inline(documents, target_doc, target, (*seen, (target_doc, pointer)))
    return {key: _inline(documents, document, value, seen) for key, value in node.items()}


def validator(name: str) -> Draft202012Validator:
    return _validators()[name]


@cache
def _accepts() -> dict[str, Accept | None]:
    """Each schema's fast acceptance check (``metastore.http.accept``), None where a
    schema uses what that module does not implement."""
    return {name: compile_accept(v.schema) for name, v in _validators().items()}


def _reject_constant(value: str) -> Any:
    """Python's parser reads ``NaN`` and ``Infinity``; JSON has no such numbers."""
    raise BadRequest(f"malformed JSON body: {value} is not a JSON value")


# one decoder for every body (``json.loads`` with an option builds a new one per call)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(raw: bytes) -> Any:
    """``json.loads(raw, parse_constant=...)`` with the shared decoder: the same text
    decoding (UTF-8, -16 or -32 as detected) and the same errors."""
    return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))


async def receive(request: web.Request, limit: int, timeout: float) -> bytes:  # noqa: ASYNC109
    """The whole body, decoded (``body_coding``), within ``timeout`` seconds (TimeoutError)
    and ``limit`` bytes (413) as sent and again once decoded."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"request body of {request.content_length} bytes exceeds {limit} bytes"
        )
    if not request.body_exists:
        return b""
    applied = body_coding.codings(request.headers.getall(hdrs.CONTENT_ENCODING, ()))
    try:
        if request.content.is_eof():  # the whole body came with the head: nothing to wait for
            sent = await request.read()
        else:
            async with asyncio.timeout(timeout):
                sent = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes") from None
    if not applied:
        return sent
    # inflating up to ``limit`` bytes is CPU work: a thread, as for parsing a large body
    return await asyncio.to_thread(body_coding.decode, sent, applied, limit)


def body_of(request: web.Request) -> bytes:
    """The body ``receive`` read for this request."""
    body = request.get(BODY)
    assert isinstance(body, bytes), "the read_body middleware receives every body first"
    return body


async def off_loop(size: int, function: Callable[..., R], *args: Any) -> R:
    """``function(*args)``, in a worker thread when it works on more than OFF_LOOP_BYTES."""
    if size > OFF_LOOP_BYTES:
        return await asyncio.to_thread(function, *args)
    return function(*args)


async def read_json(request: web.Request, schema: str) -> dict[str, Any]:
    """The body as JSON valid against ``schema``, parsed once per request and schema
    (authorization reads some bodies before their handler does)."""
    parsed = request.get(PARSED)
    if isinstance(parsed, tuple) and parsed[0] == schema:
        body: dict[str, Any] = parsed[1]
        return body
    raw = body_of(request)
    body = await off_loop(len(raw), parse_json, raw, schema)
    request[PARSED] = (schema, body)
    return body


def parse_json(raw: bytes, schema: str) -> dict[str, Any]:
    """Strict JSON that must be an object valid against ``schemas/api/<schema>.json``."""
    if not raw:
        raise BadRequest("request body is empty; a JSON object is required")
    # the parser's own words ("Expecting ',' delimiter") are not the answer: where the
    # text stops being JSON is, as numbers the client can look up in what it sent
    try:
        body = _loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise BadRequest(f"malformed JSON body: not JSON from {where}") from None
    except UnicodeDecodeError:
        raise BadRequest("malformed JSON body: not UTF-8 (nor UTF-16 or -32) text") from None
    except ValueError:  # what else the parser raises: an integer past Python's digit limit
        raise BadRequest("malformed JSON body: an integer with too many digits") from None
    except RecursionError:
        raise BadRequest("malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the JSON body must be an object")
    check_values(raw, body, iceberg=schema.startswith("iceberg_"))
    accept = _accepts()[schema]
    if accept is not None and accept(body):
        return body
    # invalid (or not compiled): ``jsonschema`` decides, and words the error
    errors = sorted(validator(schema).iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(body)"
        raise ValidationFailed(f"invalid request at {where}: {first.message}")
    return body
