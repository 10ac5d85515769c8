"""Time index (``.timeindex``): a sparse map from timestamp to offset within a segment.

Mirrors ``org.apache.kafka.storage.internals.log.TimeIndex`` (search from ``AbstractIndex``).

Layout: no header; ``entries = len // 12`` big-endian 12-byte entries::

    bytes 0-7    int64  timestamp (ms)
    bytes 8-11   int32  relative offset  (absolute offset - segment base offset)

Example: timestamp 1700000000000, relative offset 5 is
``00 00 01 8B CF E5 68 00 00 00 00 05``.

An entry ``(T, O)`` means "the largest timestamp seen up to offset O is T". Timestamps are
non-decreasing within a file (Kafka only appends a strictly larger one).

Sanity check (``TimeIndex.sanityCheck``): the length is a multiple of 12; when not empty, the last
timestamp is >= the first and the last offset is >= the base offset. Trailing zero entries (an
untrimmed preallocated file) therefore fail unless every timestamp is <= 0.

Lookups read the buffer in place with ``struct.unpack_from``; nothing is decoded up front.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from gateway.errors import CorruptIndexError
from gateway.kafka.fixed_index import FixedEntryIndex
from gateway.kafka.ints import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    check_int,
)

__all__ = [
    "ENTRY_SIZE",
    "NO_TIMESTAMP",
    "TimeIndex",
    "TimestampOffset",
    "encode_time_index",
]

ENTRY_SIZE = 12
"""Bytes per time-index entry."""

NO_TIMESTAMP = -1
"""``RecordBatch.NO_TIMESTAMP``: the timestamp of the "no entry" lookup answer."""

_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_TIMESTAMP = struct.Struct(">q")


class TimestampOffset(NamedTuple):
    """A time-index entry: ``timestamp`` (ms) and absolute ``offset``."""

    timestamp: int
    offset: int


class TimeIndex(FixedEntryIndex):
    """A read-only time index over a buffer (bytes, or a memoryview over an mmap).

    The constructor runs Kafka's sanity check and raises :class:`CorruptIndexError` when it
    fails; ``check=False`` skips it (entries are then ``len(buf) // 12``, as Kafka counts them).
    """

    ENTRY_SIZE = ENTRY_SIZE
    KIND = "time index"
    __slots__ = ()

    def sanity_check(self) -> None:
        """Kafka's ``TimeIndex.sanityCheck``; raises :class:`CorruptIndexError`."""
        super().sanity_check()
        if self._entries == 0:
            return
        last = self.last_entry()
        first_timestamp = _TIMESTAMP.unpack_from(self._buf, 0)[0]
        if last.timestamp < first_timestamp:
            raise CorruptIndexError(
                f"time index has {self._entries} entries but its last timestamp "
                f"{last.timestamp} is less than its first timestamp {first_timestamp} "
                "(trailing zero entries of an untrimmed file look like this)"
            )
        if last.offset < self._base_offset:
            raise CorruptIndexError(
                f"time index has {self._entries} entries but its last offset {last.offset} "
                f"is less than the base offset {self._base_offset}"
            )

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry (0-based); ``IndexError`` outside ``[0, len)``."""
        self._check_slot(n)
        timestamp, relative = _ENTRY.unpack_from(self._buf, n * ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def last_entry(self) -> TimestampOffset:
        """The last entry; ``(NO_TIMESTAMP, base_offset)`` when empty (Kafka's ``lastEntry``)."""
        if self._entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return self.entry(self._entries - 1)

    def entries(self) -> Iterator[TimestampOffset]:
        """All entries in file order."""
        base = self._base_offset
        view = memoryview(self._buf)[: self._entries * ENTRY_SIZE]
        for timestamp, relative in _ENTRY.iter_unpack(view):
            yield TimestampOffset(timestamp, base + relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``.

        ``(NO_TIMESTAMP, base_offset)`` when there is none. Among entries with equal timestamps
        the last one is returned (Kafka-written files have none: its ``maybeAppend`` only
        appends a strictly larger timestamp).
        """
        buf = self._buf
        unpack = _TIMESTAMP.unpack_from
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(buf, mid * ENTRY_SIZE)[0] <= target_timestamp:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        timestamp, relative = _ENTRY.unpack_from(buf, (lo - 1) * ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)


def encode_time_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode ``(timestamp, absolute offset)`` pairs as a time index for ``base_offset``.

    Raises ``ValueError`` when a timestamp does not fit an int64, a relative offset is outside
    ``[0, 2^31 - 1]``, or timestamps or offsets decrease (``TimeIndex.maybeAppend`` refuses both).
    """
    out = bytearray()
    previous: tuple[int, int] | None = None
    for timestamp, offset in entries:
        check_int("timestamp", timestamp, INT64_MIN, INT64_MAX)
        relative = offset - base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(
                f"offset {offset} is not within [base offset {base_offset}, base + 2^31 - 1]"
            )
        if previous is not None:
            if timestamp < previous[0]:
                raise ValueError(f"timestamp {timestamp} is below the previous {previous[0]}")
            if offset < previous[1]:
                raise ValueError(f"offset {offset} is below the previous {previous[1]}")
        out += _ENTRY.pack(timestamp, relative)
        previous = (timestamp, offset)
    return bytes(out)
