"""Requests refused below the app, answered in the Iceberg error shape with one log line.

Some requests never reach the middlewares: aiohttp's parser refuses a head it cannot
read (a header name with a space, a line past 8,190 bytes, a chunk size that is not
hex, ``Content-Length`` beside ``Transfer-Encoding``) and answers it itself. Left to
aiohttp, that answer is plain text and each one is logged at ERROR with a traceback
of the parser, so any client could fill the log with tracebacks at the rate it can
send bad requests. They are the client's errors, not the node's: ``ProtocolErrors``
answers them as every other refusal (a 400 in the ``{"error": {...}}`` shape, the
connection closed since the parser lost its place) and logs one WARNING line without
a traceback. Failures of the node itself (a 5xx aiohttp makes) keep their traceback.

A body whose framing breaks after its head was accepted (a bad chunk size in a later
packet, as aiohttp's pure-Python parser reports it) reaches the handlers as
``RequestPayloadError`` while ``receive`` reads it; ``read_body`` refuses it with the
same words (``client_message``), and aiohttp's own attempt to read the rest of that
body is logged as one line here too. Bodies are decoded by the node, not the parser
(``metastore.http.body_coding``).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from metastore.errors import bounded
from metastore.http.responses import error_response, error_type_of

log = logging.getLogger("metastore.http.protocol")

MAX_LOGGED_CHARS = 300  # of the parser's words, which quote the client's bytes
_CLIENT_ERRORS = (HttpProcessingError, RequestPayloadError)


def client_message(exc: BaseException) -> str:
    """What the parser said about a client's bytes, on one line.

    aiohttp's words span lines (the offending bytes, then a caret under them) and a
    payload error repeats its status ("400, message: ..."); both are folded here.
    """
    text = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
    if isinstance(exc, RequestPayloadError):
        text = text.removeprefix("400, message:")
    return " ".join(str(text).split()) or type(exc).__name__


class ProtocolErrors(RequestHandler):
    """aiohttp's request handler, with its own refusals in the node's shape and words."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status < 500 and isinstance(exc, _CLIENT_ERRORS):
            words = client_message(exc)
            # another protocol (TLS, say) sent to this port: aiohttp's own judgement
            quiet = isinstance(exc, BadHttpMethod) and self._request_count == 1
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "refused a malformed request from %s: %s",
                request.remote,
                bounded(words, MAX_LOGGED_CHARS),
            )
            text = f"malformed request: {words}"
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            text = "internal server error (logged)"
        if request.writer.output_size > 0:  # part of an answer is out: nothing can follow
            raise ConnectionError("an answer was already started: the error cannot be sent")
        response = error_response(status, error_type_of(status), text)
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, RequestPayloadError):  # the rest of a body refused already
            log.warning(
                "dropped the rest of a malformed request body: %s",
                bounded(client_message(exc), MAX_LOGGED_CHARS),
            )
            return
        super().log_exception(*args, **kw)
