"""The audit log: one JSON line per data request (every ``/v1/`` route), to its own stream
(issue 16).

A line says who read what and how it ended: ``ts`` (UTC, ms), ``principal``, ``source``
(the client address), ``method``, ``path`` (without the query), ``topic``, ``partition``,
``offset`` (asked), ``next_offset`` (one past what was served), ``bytes`` (of the response
body), ``status``, ``error_code`` (of an error answer) and ``request_id``. Never a record's
contents, a credential or key material: the fields are fixed here, and none of them is a
header value but the request id (a short token the gateway checked).

Lines go to a file opened for appending (each line one ``write`` of a whole line, so several
worker processes appending to one file do not interleave within a line) or to standard output.
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import orjson

from gateway.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class AuditEvent:
    principal: str | None  # None: the request did not get as far as authentication
    source: str | None
    method: str
    path: str
    status: int
    bytes: int
    request_id: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    next_offset: int | None = None
    error_code: str | None = None


class AuditLog:
    """Writes :class:`AuditEvent` lines; :meth:`open` takes a path or ``-`` (stdout)."""

    def __init__(self, stream: IO[bytes], *, owned: bool = False) -> None:
        self._stream = stream
        self._owned = owned

    @classmethod
    def open(cls, target: str) -> AuditLog:
        if target == "-":
            return cls(sys.stdout.buffer)
        try:
            stream = Path(target).open("ab", buffering=0)  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise ConfigurationError(
                f"audit_log {target}: cannot open it for appending: "
                f"{exc.strerror or type(exc).__name__}"
            ) from exc
        return cls(stream, owned=True)

    def write(self, event: AuditEvent) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        line = orjson.dumps({"ts": now.replace("+00:00", "Z"), **asdict(event)}) + b"\n"
        self._stream.write(line)
        if not self._owned:
            self._stream.flush()

    def close(self) -> None:
        if self._owned:
            self._stream.close()
