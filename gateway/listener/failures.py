"""The partitions of one request that failed, logged on one line: a count and the first few
(a request naming thousands of partitions must not write thousands of log lines)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from gateway.errors import GatewayError
from gateway.listener import codes

LOGGED: Final = 3
"""The partitions named in a request's failure line."""


@dataclass(slots=True)
class Failures:
    """One request's failed partitions (:meth:`add`), logged once by :meth:`log`: at
    WARNING when one was an unexpected error or corrupt data, else at INFO."""

    api: str  # the line's prefix: "fetch", "list offsets"
    logger: logging.Logger
    count: int = 0
    serious: bool = False
    examples: list[str] = field(default_factory=list)
    unexpected: BaseException | None = None

    def add(self, where: str, code: int, what: object) -> None:
        self.count += 1
        self.serious |= code in (codes.UNKNOWN_SERVER_ERROR, codes.CORRUPT_MESSAGE)
        if len(self.examples) < LOGGED:
            self.examples.append(f"{where}: error {code}: {what}")

    def failed(self, where: str, exc: Exception) -> int:
        """The error code of a partition whose read or lookup raised ``exc``
        (:func:`codes.error_code`), added to the line; an exception that is not a
        :class:`GatewayError` is a bug, logged with its traceback (the first one's)."""
        code = codes.error_code(exc)
        if isinstance(exc, GatewayError):
            self.add(where, code, exc)
        else:
            self.add(where, code, repr(exc))
            self.unexpected = self.unexpected or exc
        return code

    def log(self) -> None:
        if not self.count:
            return
        level = logging.WARNING if self.serious else logging.INFO
        more = f" (and {self.count - len(self.examples)} more)" if self.count > 1 else ""
        self.logger.log(level, "%s: %d partition(s) failed: %s%s", self.api, self.count,
                        "; ".join(self.examples), more, exc_info=self.unexpected)  # fmt: skip
