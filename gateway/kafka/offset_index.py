"""Offset index (``.index``): a sparse map from offset to byte position in the segment ``.log``.

Mirrors ``org.apache.kafka.storage.internals.log.OffsetIndex`` (search from ``AbstractIndex``).

Layout: no header; ``entries = len // 8`` big-endian 8-byte entries::

    bytes 0-3   int32  relative offset  (absolute offset - segment base offset)
    bytes 4-7   int32  physical position in the .log of the chunk the entry describes

Example: relative offset 5 at position 4096 is ``00 00 00 05 00 00 10 00``.

An entry ``(O, P)`` means "the batch(es) starting at byte P end at offset O". Offsets are strictly
increasing (``OffsetIndex.append`` refuses anything else) and so are positions.

Sanity check (``OffsetIndex.sanityCheck``): the length is a multiple of 8, and the index is empty or
its last offset is >= the base offset. Trailing zero entries (a preallocated file that was never
trimmed) decode as ``(base_offset, 0)`` and pass.

Lookups read the buffer in place with ``struct.unpack_from``; nothing is decoded up front.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from gateway.errors import CorruptIndexError
from gateway.kafka.fixed_index import FixedEntryIndex
from gateway.kafka.ints import INT32_MAX, check_int

__all__ = [
    "ENTRY_SIZE",
    "OffsetIndex",
    "OffsetPosition",
    "encode_offset_index",
]

ENTRY_SIZE = 8
"""Bytes per offset-index entry."""

_ENTRY = struct.Struct(">ii")  # relative offset, position
_INT32 = struct.Struct(">i")  # either half of an entry
_POSITION_AT = 4  # byte offset of the position inside an entry

_WARM_ENTRIES = 8192 // ENTRY_SIZE
"""``AbstractIndex.warmEntries()``: the last 8 KiB of entries are searched first."""


class OffsetPosition(NamedTuple):
    """An offset-index entry: absolute ``offset`` and byte ``position`` in the ``.log``."""

    offset: int
    position: int


class OffsetIndex(FixedEntryIndex):
    """A read-only offset index over a buffer (bytes, or a memoryview over an mmap).

    The constructor runs Kafka's sanity check and raises :class:`CorruptIndexError` when it
    fails; ``check=False`` skips it (entries are then ``len(buf) // 8``, as Kafka counts them).
    """

    ENTRY_SIZE = ENTRY_SIZE
    KIND = "offset index"
    __slots__ = ()

    def sanity_check(self) -> None:
        """Kafka's ``OffsetIndex.sanityCheck``; raises :class:`CorruptIndexError`."""
        super().sanity_check()
        last_offset = self.last_offset
        if self._entries != 0 and last_offset < self._base_offset:
            raise CorruptIndexError(
                f"offset index has {self._entries} entries but its last offset {last_offset} "
                f"is less than the base offset {self._base_offset}"
            )

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; the base offset when the index is empty."""
        if self._entries == 0:
            return self._base_offset
        relative: int = _INT32.unpack_from(self._buf, (self._entries - 1) * ENTRY_SIZE)[0]
        return self._base_offset + relative

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry (0-based); ``IndexError`` outside ``[0, len)``."""
        self._check_slot(n)
        relative, position = _ENTRY.unpack_from(self._buf, n * ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)

    def entries(self) -> Iterator[OffsetPosition]:
        """All entries in file order."""
        base = self._base_offset
        view = memoryview(self._buf)[: self._entries * ENTRY_SIZE]
        for relative, position in _ENTRY.iter_unpack(view):
            yield OffsetPosition(base + relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``; ``(base_offset, 0)`` if none.

        Same probe sequence as Kafka (warm section first, early exit on an exact match), so
        the answer equals the broker's even for an untrimmed index with trailing zero entries.
        """
        slot = self._largest_lower_bound_slot(target_offset - self._base_offset)
        if slot < 0:
            return OffsetPosition(self._base_offset, 0)
        relative, position = _ENTRY.unpack_from(self._buf, slot * ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)

    def fetch_upper_bound_offset(self, position: int) -> OffsetPosition | None:
        """The first entry whose position is >= ``position``; ``None`` if there is none.

        Kafka's ``OffsetIndex.fetchUpperBoundOffset(fetchOffset, fetchSize)`` with
        ``position = fetchOffset.position + fetchSize``. Kafka's search skips slot 0 when its
        position equals the target exactly and answers slot 1 (or nothing) instead; this
        returns the entry the contract describes (a smaller, still valid, upper bound).
        """
        buf = self._buf
        unpack = _INT32.unpack_from
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(buf, mid * ENTRY_SIZE + _POSITION_AT)[0] < position:
                lo = mid + 1
            else:
                hi = mid
        if lo == self._entries:
            return None
        relative, found = _ENTRY.unpack_from(buf, lo * ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, found)

    def _largest_lower_bound_slot(self, target: int) -> int:
        """``AbstractIndex.indexSlotRangeFor(..., KEY, LARGEST_LOWER_BOUND)`` on relative keys."""
        entries = self._entries
        if entries == 0:
            return -1
        buf = self._buf
        unpack = _INT32.unpack_from
        first_hot = max(0, entries - 1 - _WARM_ENTRIES)
        if unpack(buf, first_hot * ENTRY_SIZE)[0] < target:
            lo, hi = first_hot, entries - 1
        else:
            if unpack(buf, 0)[0] > target:
                return -1
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            key = unpack(buf, mid * ENTRY_SIZE)[0]
            if key > target:
                hi = mid - 1
            elif key < target:
                lo = mid
            else:
                return mid
        return lo


def encode_offset_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Encode ``(absolute offset, position)`` pairs as an offset index for ``base_offset``.

    Raises ``ValueError`` when a relative offset is outside ``[0, 2^31 - 1]``, a position is
    outside ``[0, 2^31 - 1]``, offsets are not strictly increasing or positions decrease (what
    ``OffsetIndex.append`` and ``LogSegment`` guarantee for files Kafka writes).
    """
    out = bytearray()
    previous: tuple[int, int] | None = None
    for offset, position in entries:
        relative = offset - base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(
                f"offset {offset} is not within [base offset {base_offset}, base + 2^31 - 1]"
            )
        check_int("position", position, 0, INT32_MAX)
        if previous is not None:
            if offset <= previous[0]:
                raise ValueError(f"offset {offset} does not follow {previous[0]}: not increasing")
            if position < previous[1]:
                raise ValueError(f"position {position} is below the previous {previous[1]}")
        out += _ENTRY.pack(relative, position)
        previous = (offset, position)
    return bytes(out)
