"""One log format for the whole process (gateway and uvicorn alike), as text or JSON lines.

``text``: ``2026-11-22T22:51:49.123Z INFO gateway.service.open: message [request_id=…]``.
``json``: one object per line, ``{"ts", "level", "logger", "message"}`` plus ``request_id``
inside a request and ``exc`` (the traceback) when one is logged. The request id is the
client's ``X-Request-ID`` when it is a short token, else a fresh one; it is echoed in the
response header of that name.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final, Literal

LogFormat = Literal["text", "json"]
REQUEST_ID_HEADER: Final = "x-request-id"
_CLIENT_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,64}")

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def new_request_id(given: str | None) -> str:
    """The client's id when it is a token of at most 64 characters, else a fresh one."""
    if given is not None and _CLIENT_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def _timestamp(record: logging.LogRecord) -> str:
    when = datetime.fromtimestamp(record.created, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        rid = request_id.get()
        if rid is not None:
            line += f" [request_id={rid}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id.get()
        if rid is not None:
            entry["request_id"] = rid
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _GatewayHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stderr handler :func:`configure_logging` installs (and replaces on a second call)."""


def configure_logging(level: str, fmt: LogFormat) -> None:
    """Route every logger (uvicorn's too: start it with ``log_config=None``) through one
    stderr handler on the root logger, in the chosen format."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _GatewayHandler)]:
        root.removeHandler(old)
    handler = _GatewayHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
