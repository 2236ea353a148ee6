"""The Iceberg error shape every refusal leaves in: {"error": {"message", "type", "code"}}.

One place for it, so that the middlewares, the token endpoint and the refusals made
below the app (``metastore.http.protocol_errors``) answer in the same words.
"""

from __future__ import annotations

import json

from aiohttp import web

from metastore.errors import bounded

# the type of an HTTP status no MetastoreError names (aiohttp's own refusals)
_HTTP_TYPES = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    406: "NotAcceptableException",
    408: "RequestTimeoutException",
    409: "ConflictException",
    413: "RequestEntityTooLargeException",
    415: "UnsupportedMediaTypeException",
    500: "InternalServerError",
    503: "ServiceUnavailableException",
}


def error_type_of(status: int) -> str:
    """The error type named for ``status`` in answers no MetastoreError made."""
    return _HTTP_TYPES.get(status, "HttpException")


def error_response(status: int, error_type: str, message: str) -> web.Response:
    body = {"error": {"message": bounded(message), "type": error_type, "code": status}}
    return web.json_response(body, status=status, dumps=json.dumps)
