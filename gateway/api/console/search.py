"""A console search: records of a partition filtered page by page, within a byte budget.

The filter is applied to records as the records route renders them in the formats asked
(:mod:`gateway.api.console.window`): a key or value substring of the shown text, a header
(by name, and a substring of its value), a JSON field equal to a value, or a key equal to a
text (the key lookup). A scan reads pages from ``start`` until ``until``, the end of what is
readable, or ``budget`` bytes of stored batches, whichever comes first, and reports after
every page; where it stopped early, ``next_offset`` is where the same search goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from gateway.api.render import OFFLOAD_BYTES, off_loop

ReadPage = Callable[[int, int], Awaitable[tuple[dict[str, Any], int]]]
"""One page of the records route from an offset within a byte count: its JSON document and
the stored batch bytes it read."""
Stop = Literal["end", "until", "budget", "matches", ""]
_MISSING: Final = object()


def shown(value: Any) -> str:
    """A key, value or header value as the console shows it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


@dataclass(frozen=True, slots=True)
class Filter:
    key: str = ""  # substring of the key
    key_equals: str | None = None  # the key, exactly (the key lookup)
    value: str = ""  # substring of the value
    header: str = ""  # a header's name
    header_value: str = ""  # substring of that header's value
    json_path: str = ""  # a.b.0.c: a field of the value read as JSON
    json_value: str = ""  # equal to this JSON value (or this text)

    @property
    def empty(self) -> bool:
        return not (
            self.key
            or self.key_equals is not None
            or self.value
            or self.header
            or self.header_value
            or self.json_path
        )

    def matches(self, record: dict[str, Any]) -> bool:
        key = shown(record.get("key"))
        if self.key and self.key not in key:
            return False
        if self.key_equals is not None and (record.get("key") is None or key != self.key_equals):
            return False
        if self.value and self.value not in shown(record.get("value")):
            return False
        if (self.header or self.header_value) and not any(
            (not self.header or h.get("key") == self.header)
            and self.header_value in shown(h.get("value"))
            for h in record.get("headers") or ()
        ):
            return False
        return not self.json_path or self._json_equal(record.get("value"))

    def select(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ``records`` that match (CPU work: a page's worth, off the loop when large)."""
        return [r for r in records if self.matches(r)]

    def _json_equal(self, value: Any) -> bool:
        if isinstance(value, str):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError:
                return False
        found = _field(value, self.json_path)
        if found is _MISSING:
            return False
        try:
            wanted = orjson.loads(self.json_value)
        except orjson.JSONDecodeError:
            wanted = self.json_value
        return bool(found == wanted and type(found) is type(wanted)) or found == self.json_value


def _field(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


@dataclass(slots=True)
class Progress:
    next_offset: int  # scanned up to here
    bytes_read: int = 0
    records: int = 0
    matches: list[dict[str, Any]] = field(default_factory=list)  # this page's
    found: int = 0
    stopped: Stop = ""


async def scan(
    read: ReadPage,
    flt: Filter,
    *,
    start: int,
    until: int,
    budget: int,
    page_bytes: int,
    max_matches: int,
) -> AsyncIterator[Progress]:
    """Progress after every page; the last one says why it stopped."""
    progress = Progress(start)
    while True:
        if progress.next_offset >= until:
            progress.stopped = "until"
        elif progress.bytes_read >= budget:
            progress.stopped = "budget"
        elif progress.found >= max_matches:
            progress.stopped = "matches"
        if progress.stopped:
            progress.matches = []
            yield progress
            return
        at = progress.next_offset
        doc, read_bytes = await read(at, max(1, min(page_bytes, budget - progress.bytes_read)))
        records = [r for r in doc["records"] if r["offset"] < until]
        found = await off_loop(read_bytes > OFFLOAD_BYTES, flt.select, records)
        hits = found[: max_matches - progress.found]
        following = min(int(doc["next_offset"]), until)
        if hits and progress.found + len(hits) >= max_matches:
            following = hits[-1]["offset"] + 1  # go on right after the last match shown
        progress.next_offset = following
        progress.bytes_read += read_bytes
        progress.records += sum(1 for r in records if r["offset"] < following)
        progress.matches = hits
        progress.found += len(hits)
        if (doc["end_of_remote_log"] and following >= int(doc["next_offset"])) or following <= at:
            progress.stopped = "end"
        yield progress
        if progress.stopped:
            return
