"""One remote segment's indexes: its identity, the raw bytes a loader returns, the cache entry.

The entry mirrors what Kafka's ``RemoteIndexCache.Entry`` holds (offset, time and transaction
index of one remote segment) plus the segment's leader-epoch checkpoint, which Kafka keeps out
of its cache. It is immutable: an entry is built once from the bytes, checked with Kafka's
sanity checks (``kafka-formats.md`` §10) and never changed, closed or unmapped afterwards, so a
reader holding one keeps getting correct answers after the cache has evicted it (the
"entry is marked for cleanup" race of KAFKA-17184 cannot happen).

Building is cheap where it can be: the offset and time indexes are read in place
(``struct.unpack_from`` on the loader's bytes, nothing decoded up front, O(1) sanity checks);
only the transaction index (one 34-byte entry per aborted transaction) and the checkpoint text
are decoded, as Kafka decodes them.

Weight (what the byte-bounded cache counts) is the sum of the four buffers' lengths: Kafka's
``entries x 8 + entries x 12 + txnindex size`` plus the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from gateway.kafka.epoch import EpochEntry, LeaderEpochCache
from gateway.kafka.offset_index import OffsetIndex, OffsetPosition
from gateway.kafka.time_index import TimeIndex, TimestampOffset
from gateway.kafka.txn_index import TransactionIndex, TxnIndexSearchResult
from indexcache.validate import check_offset_index, check_time_index, check_txn_index

__all__ = [
    "IndexLoader",
    "SegmentIndexBytes",
    "SegmentIndexes",
    "SegmentKey",
]

_SEGMENT_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""URL-safe base64 (Kafka's ``Uuid.toString``) and anything else safe in a file name."""


@dataclass(frozen=True, slots=True)
class SegmentKey:
    """The identity of a remote segment: its id (the segment Uuid as Kafka prints it, URL-safe
    base64 without padding) and its start offset.

    A remote segment's objects are never rewritten (a re-upload gets a new Uuid), so what is
    cached under a key can never go stale; it can only outlive the segment (see
    ``RemoteIndexCache.invalidate``). Raises ``ValueError`` for an id that is not 1 to 64
    characters of ``[A-Za-z0-9_-]`` (it names files in the disk tier) or a negative offset.
    """

    segment_id: str
    start_offset: int

    def __post_init__(self) -> None:
        if _SEGMENT_ID.fullmatch(self.segment_id) is None:
            raise ValueError(f"segment id {self.segment_id!r} is not 1-64 chars of [A-Za-z0-9_-]")
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} is negative")

    @property
    def file_stem(self) -> str:
        """``<startOffset>_<segmentId>``: Kafka's cache file name without its suffix."""
        return f"{self.start_offset}_{self.segment_id}"

    @classmethod
    def from_file_stem(cls, stem: str) -> SegmentKey | None:
        """The key a file stem names, or ``None`` when it names none."""
        offset, sep, segment_id = stem.partition("_")
        if not sep or not offset.isascii() or not offset.isdigit():
            return None
        try:
            return cls(segment_id, int(offset))
        except ValueError:
            return None


def _own_bytes(value: bytes | bytearray | memoryview) -> bytes:
    # A memoryview over a bigger buffer would keep all of it alive behind a small weight.
    return value if type(value) is bytes else bytes(value)


@dataclass(frozen=True, slots=True)
class SegmentIndexBytes:
    """The raw index bytes of one remote segment, as a loader returns them.

    ``txn`` is ``None`` when the segment has no transaction index (the plugin uploads none when
    it is empty); it then behaves as an empty one. Buffers other than ``bytes`` are copied.
    """

    base_offset: int
    offset: bytes
    time: bytes
    leader_epoch: bytes
    txn: bytes | None = None

    def __post_init__(self) -> None:
        for name in ("offset", "time", "leader_epoch", "txn"):
            value = getattr(self, name)
            if value is not None and type(value) is not bytes:
                object.__setattr__(self, name, _own_bytes(value))

    @property
    def size(self) -> int:
        """Total bytes of the four buffers."""
        return (
            len(self.offset)
            + len(self.time)
            + len(self.leader_epoch)
            + (len(self.txn) if self.txn is not None else 0)
        )


IndexLoader: TypeAlias = Callable[[SegmentKey], Awaitable[SegmentIndexBytes]]
"""Fetches a segment's index bytes on a miss (from S3, a manifest, a test's dict...)."""


class SegmentIndexes:
    """The checked, immutable indexes of one remote segment and the lookups a fetch needs.

    Thread-safe for reading (nothing mutates after construction). Raises
    :class:`gateway.errors.CorruptIndexError` or :class:`gateway.errors.CorruptCheckpointError`
    when a buffer fails its check.
    """

    __slots__ = ("_checked", "_epochs", "_offset", "_raw", "_time", "_txn")

    def __init__(self, raw: SegmentIndexBytes) -> None:
        base = raw.base_offset
        self._raw = raw
        self._offset = OffsetIndex(raw.offset, base)
        self._time = TimeIndex(raw.time, base)
        self._txn = TransactionIndex(raw.txn if raw.txn is not None else b"", base)
        self._epochs = LeaderEpochCache.from_checkpoint(raw.leader_epoch)
        self._checked: tuple[int, int] | None = None

    def checked_against(self, end_offset: int, size: int) -> bool:
        """Whether :meth:`check_against` already passed for this end offset and size."""
        return self._checked == (end_offset, size)

    def check_against(self, end_offset: int, size: int) -> None:
        """Check every entry against the segment's metadata (``indexcache.validate``): the
        first call per (end offset, size) does the O(entries) work, later ones return at once.
        Raises :class:`gateway.errors.CorruptIndexError`."""
        if self._checked == (end_offset, size):
            return
        check_offset_index(self._offset, end_offset, size)
        check_time_index(self._time, end_offset)
        check_txn_index(self._txn, end_offset)
        self._checked = (end_offset, size)

    @property
    def raw(self) -> SegmentIndexBytes:
        """The bytes the entry was built from (what the disk tier writes)."""
        return self._raw

    @property
    def base_offset(self) -> int:
        """The segment's start offset."""
        return self._raw.base_offset

    @property
    def weight(self) -> int:
        """Bytes held: what the cache's byte bound counts for this entry."""
        return self._raw.size

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset

    @property
    def time_index(self) -> TimeIndex:
        return self._time

    @property
    def txn_index(self) -> TransactionIndex:
        """Empty when the segment has none."""
        return self._txn

    @property
    def leader_epoch_entries(self) -> list[EpochEntry]:
        """A copy of the segment's leader-epoch checkpoint entries, ascending."""
        return self._epochs.entries

    def __repr__(self) -> str:
        return (
            f"SegmentIndexes(base_offset={self.base_offset}, offset_entries={len(self._offset)}, "
            f"time_entries={len(self._time)}, txns={len(self._txn)}, weight={self.weight})"
        )

    def lookup_offset(self, offset: int) -> OffsetPosition:
        """The offset-index entry with the largest offset <= ``offset`` (floor); ``(base, 0)``
        when there is none."""
        return self._offset.lookup(offset)

    def lookup_timestamp(self, timestamp: int) -> TimestampOffset:
        """The time-index entry with the largest timestamp <= ``timestamp`` (floor);
        ``(NO_TIMESTAMP, base)`` when there is none."""
        return self._time.lookup(timestamp)

    def upper_bound_at(self, position: int) -> OffsetPosition | None:
        """The first offset-index entry whose position is >= ``position``; ``None`` if none."""
        return self._offset.fetch_upper_bound_offset(position)

    def aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` and whether
        the search is complete (later segments need not be searched)."""
        return self._txn.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch of ``offset`` by the segment's checkpoint (``None`` before it)."""
        return self._epochs.epoch_for_offset(offset)
