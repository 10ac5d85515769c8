"""What the console's pages show, computed without the web framework: times in an explicit
zone, a records-over-time histogram from segment metadata alone, long values clipped, the
partition a key goes to, and what a scan will read before it starts."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.errors import InvalidRequestError
from gateway.metadata.partitioner import murmur2
from gateway.service.types import SegmentInfo

UTC: Final = ZoneInfo("UTC")
_MS_DIGITS: Final = re.compile(r"[0-9]{1,15}")
_ZONE_NAME: Final = re.compile(r"[A-Za-z0-9_+\-/]{1,64}")


def zone(name: str | None) -> ZoneInfo:
    """The IANA time zone ``name`` (UTC when empty); 400 naming ``tz`` when unknown."""
    if not name:
        return UTC
    if _ZONE_NAME.fullmatch(name) is None or ".." in name:
        raise InvalidRequestError(f"time zone {name!r}: expected an IANA name", "tz")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequestError(f"unknown time zone {name!r}", "tz") from None


def parse_time(text: str, tz: ZoneInfo) -> int:
    """A time in ms since the epoch: ms digits, or an ISO date and time (``2026-11-28T10:00``,
    seconds and fractions optional) read in ``tz`` unless it names its own offset (``Z``,
    ``+02:00``)."""
    text = text.strip()
    if _MS_DIGITS.fullmatch(text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequestError(
            f"time {text!r}: expected ms since the epoch or an ISO date and time "
            "(2026-11-28T10:00:00)",
            "time",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    ms = _ms(when)
    if ms < 0:
        raise InvalidRequestError(f"time {text!r} is before 1970", "time")
    return ms


def _ms(when: dt.datetime) -> int:
    delta = when - dt.datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def time_text(ms: int, tz: ZoneInfo) -> str:
    """``ms`` in ``tz`` as ``2026-11-28 10:00:00.123`` and the zone's abbreviation."""
    if ms < 0:
        return "none"
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, tz)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} {when.strftime('%Z')}"


def input_text(ms: int, tz: ZoneInfo) -> str:
    """``ms`` as a ``datetime-local`` input's value in ``tz``."""
    when = dt.datetime.fromtimestamp(max(ms, 0) / 1000, tz)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True, slots=True)
class Clipped:
    """A key, value or header shown in a table cell: its first ``limit`` characters, and the
    whole text when it is longer."""

    head: str
    full: str | None

    @classmethod
    def of(cls, text: str, limit: int) -> Clipped:
        return cls(text, None) if len(text) <= limit else cls(text[:limit], text)


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of the histogram: the offsets of the segments whose newest record falls in
    [``start_ms``, ``end_ms``), and where to seek to read them."""

    start_ms: int
    end_ms: int
    offsets: int
    segments: int
    first_offset: int


def histogram(segments: Sequence[SegmentInfo], bins: int = 24) -> list[Bar]:
    """Offsets over time from segment metadata alone (no byte of data read): each segment's
    offsets counted at its newest record's time, in ``bins`` equal spans of time."""
    live = [s for s in segments if not s.displaced and s.max_timestamp_ms >= 0]
    if not live:
        return []
    low = min(s.max_timestamp_ms for s in live)
    high = max(s.max_timestamp_ms for s in live) + 1
    width = max(1, -(-(high - low) // bins))
    counts = [0] * bins
    numbers = [0] * bins
    firsts: list[int | None] = [None] * bins
    for s in live:
        i = min((s.max_timestamp_ms - low) // width, bins - 1)
        counts[i] += s.end_offset - s.start_offset + 1
        numbers[i] += 1
        first = firsts[i]
        firsts[i] = s.start_offset if first is None else min(first, s.start_offset)
    return [
        Bar(low + i * width, low + (i + 1) * width, counts[i], numbers[i], -1 if f is None else f)
        for i, f in enumerate(firsts)
    ]


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's producer sends a keyed record to: ``toPositive(murmur2(key)) %
    partitions`` (``BuiltInPartitioner.partitionForKey``)."""
    if partitions < 1:
        raise InvalidRequestError("the topic has no partitions", "key")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Plan:
    """What a scan from ``start`` up to ``until`` will read, from segment metadata: the
    segments and their stored bytes (whole segments: the first may be read from within)."""

    start: int
    until: int
    segments: int
    bytes: int


def plan(segments: Sequence[SegmentInfo], start: int, until: int) -> Plan:
    """The segments a read of offsets [``start``, ``until``) reaches (displaced uploads are
    never read)."""
    hit = [
        s for s in segments if not s.displaced and s.end_offset >= start and s.start_offset < until
    ]
    return Plan(start, until, len(hit), sum(s.size for s in hit))
