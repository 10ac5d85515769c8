"""The records a console page shows, read as the records route reads them.

A page is ``count`` data records from an offset, read page after page of the records route's
JSON (:func:`gateway.api.records.page_document`), so control batches, aborted records (with
read_committed) and compacted gaps are skipped exactly as the API skips them. Paging forward
starts at one past the last record shown; paging back finds the ``count`` records before an
offset and shows the page that starts at the first of them, so forward and back cover every
record once, and every page is named by its first offset alone (a URL that shows the same
records as long as the bucket holds them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Read = Callable[[int], Awaitable[dict[str, Any]]]
"""The records route's JSON document of one page from an offset."""


@dataclass(frozen=True, slots=True)
class Window:
    records: list[dict[str, Any]]  # as the records route writes them
    next_offset: int  # where the next page starts
    log_start: int
    log_end: int
    last_stable: int | None  # read_committed only
    at_end: bool  # nothing past next_offset to read yet


async def forward(read: Read, offset: int, count: int) -> Window:
    """Up to ``count`` records from ``offset`` on (fewer at the end of what is readable)."""
    records: list[dict[str, Any]] = []
    at = offset
    while True:
        doc = await read(at)
        records.extend(doc["records"])
        if len(records) >= count:
            del records[count:]
            return _window(doc, records, records[-1]["offset"] + 1, at_end=False)
        following = int(doc["next_offset"])
        if doc["end_of_remote_log"] or following <= at:
            return _window(doc, records, following, at_end=bool(doc["end_of_remote_log"]))
        at = following


async def before(read: Read, offset: int, count: int, log_start: int) -> int:
    """The first offset of the ``count`` records just below ``offset`` (``log_start`` when
    there are fewer): the start of the page before the one at ``offset``."""
    span = max(count, 1)
    while True:
        start = max(log_start, offset - span)
        offsets = await _offsets_between(read, start, offset)
        if len(offsets) >= count or start == log_start:
            return offsets[-count] if len(offsets) >= count else log_start
        span *= 4


async def _offsets_between(read: Read, start: int, stop: int) -> list[int]:
    found: list[int] = []
    at = start
    while at < stop:
        doc = await read(at)
        found.extend(r["offset"] for r in doc["records"] if r["offset"] < stop)
        following = int(doc["next_offset"])
        if doc["end_of_remote_log"] or following <= at:
            break
        at = following
    return found


def _window(
    doc: dict[str, Any], records: list[dict[str, Any]], following: int, *, at_end: bool
) -> Window:
    return Window(
        records,
        following,
        int(doc["log_start_offset"]),
        int(doc["log_end_offset"]),
        doc["last_stable_offset"],
        at_end,
    )
