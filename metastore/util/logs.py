"""How the node logs: plain text for people, or one JSON object per line for collectors.

``METASTORE_LOG_FORMAT=text`` (the default) keeps the familiar
``time LEVEL logger: message`` lines. ``json`` writes one object per line with
``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message`` and, on every line
written while a request is handled, its ``request_id``, ``trace_id``, ``span_id``,
``tenant`` and ``principal``; an exception adds ``exception`` (the traceback as one
string), and the access log's fields (``metastore.http.observe``) are keys of their
own. The request's context travels in a ``ContextVar`` the observing middleware sets
and the authentication middleware completes, so code that logs needs no request.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from metastore.util.tracing import TraceContext

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = "fields"  # ``extra={FIELDS: {...}}``: keys of their own in a JSON line
REQUEST_ID_HEADER = "X-Request-Id"  # a request's id: sent by the client, or made by the node


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who and what the current request is, for every line logged while it runs."""

    request_id: str
    trace: TraceContext
    tenant: str | None = None
    principal: str | None = None


CURRENT: ContextVar[RequestContext | None] = ContextVar("metastore_request", default=None)


def current() -> RequestContext | None:
    return CURRENT.get()


def identify(principal: str, tenant: str) -> None:
    """The request's caller is known (authentication): its lines name it, and its tenant
    where the path named none."""
    context = CURRENT.get()
    if context is not None:
        # built field by field: ``dataclasses.replace`` costs a few µs on every request
        CURRENT.set(
            RequestContext(
                context.request_id,
                context.trace,
                tenant=context.tenant or tenant,
                principal=principal,
            )
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = CURRENT.get()
        if context is not None:
            line |= {
                "request_id": context.request_id,
                "trace_id": context.trace.trace_id,
                "span_id": context.trace.span_id,
                "tenant": context.tenant,
                "principal": context.principal,
            }
        extra = getattr(record, FIELDS, None)
        if isinstance(extra, dict):
            line |= extra
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` lines, with the time's text made once per second: the standard
    formatter's ``strftime`` on every line was 2 % of a native commit's CPU (one access
    line per request). Same text as ``logging.Formatter``'s: local time, then ``,msecs``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._stamp: tuple[int, str] = (-1, "")  # (second, its text), replaced as one

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._stamp = stamp
        return f"{stamp[1]},{int(record.msecs):03d}"  # the standard default_msec_format


def configure(level: str, log_format: str) -> None:
    """The root logger writes to stderr at ``level`` in ``log_format``: ``text`` or ``json``
    (the setting is checked in ``metastore.util.setting_rules``)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # ours is metastore.access
