"""Splits: how the records of a topic are cut into Spark input partitions (pure, picklable).

The driver walks each partition's finished segments in lineage order (the walk a consumer's
fetches take: the segment holding the next offset, then the one holding its end + 1), giving
every segment the offset range ``[lo, hi)`` it contributes. Overlapping uploads never repeat a
record: a segment only contributes offsets after those of the segments before it.

One segment is one split unless its share of bytes (estimated from the offsets it
contributes) is above ``max_bytes``: then it becomes ``parts`` splits of one segment. The
driver never reads an index to cut them; each executor task reads the segment's offset index
and computes the same cut points with :func:`split_byte_range` (a pure function of the index
bytes and the split), so the tasks of one segment agree without talking to each other:

* the segment's byte region is ``[A, B)``: A = the offset-index floor position of ``lo`` (0
  when ``lo`` is the segment start), B = the position of the first index entry after the one
  covering ``hi - 1`` (the segment size when there is none, or when ``hi`` is past the end);
* cut ``k`` of ``parts`` is snapped to the first index entry at or after ``A + k (B - A) /
  parts``. Index positions are batch starts (``kafka-formats.md`` §8), so each batch lies in
  exactly one split: no gaps, no duplicates, whatever the batch sizes.

Records are still filtered by ``[lo, hi)`` (a batch may start before ``lo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import CorruptIndexError
from gateway.kafka.offset_index import OffsetIndex
from gateway.metadata.model import RemoteLogSegmentMetadata
from gateway.read.framing import SegmentBounds
from gateway.remote.keys import Suffix, segment_key


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What an executor needs to find one remote segment and bound its reads."""

    key: str  # the ``.log`` object key (the manifest and indexes are siblings)
    start_offset: int
    end_offset: int  # inclusive, from the metadata
    size: int  # the original ``.log`` size
    txn_index_empty: bool
    walk: int  # position in the partition's lineage walk
    epochs: tuple[tuple[int, int], ...] = ()  # leader epochs: (epoch, start offset), ascending

    @property
    def bounds(self) -> SegmentBounds:
        """What the metadata promises about the segment, for :class:`~gateway.read.framing.
        SegmentFramer`."""
        return SegmentBounds(self.key, self.start_offset, self.end_offset, self.size, self.epochs)


def object_key(meta: RemoteLogSegmentMetadata, key_prefix: str, suffix: Suffix) -> str:
    """The key of ``meta``'s object ``suffix`` under ``key_prefix``."""
    return segment_key(key_prefix, meta, suffix).key


def segment_ref(meta: RemoteLogSegmentMetadata, key_prefix: str, walk: int) -> SegmentRef:
    """The :class:`SegmentRef` of finished segment ``meta``, ``walk``-th of its lineage walk."""
    return SegmentRef(
        object_key(meta, key_prefix, Suffix.LOG),
        meta.start_offset,
        meta.end_offset,
        meta.segment_size_in_bytes,
        meta.txn_index_empty,
        walk,
        tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1])),
    )


@dataclass(frozen=True, slots=True)
class Split:
    """One Spark input partition: part ``part`` of ``parts`` of one segment, offsets
    ``[start_offset, end_offset)``."""

    topic: str
    partition: int
    segment: SegmentRef
    start_offset: int
    end_offset: int
    part: int = 0
    parts: int = 1

    @property
    def whole_segment(self) -> bool:
        """Reads the whole segment: no offset index needed to find its bytes."""
        seg = self.segment
        return (
            self.parts == 1
            and self.start_offset <= seg.start_offset
            and self.end_offset > seg.end_offset
        )


def share_bytes(ref: SegmentRef, lo: int, hi: int) -> int:
    """The bytes of ``ref`` estimated to hold offsets ``[lo, hi)`` (by their share of its
    offsets)."""
    span = ref.end_offset + 1 - ref.start_offset
    covered = min(hi, ref.end_offset + 1) - max(lo, ref.start_offset)
    return ref.size if span <= 0 else ref.size * max(covered, 0) // span


def plan_partition(
    topic: str,
    partition: int,
    walk: Sequence[tuple[SegmentRef, int, int]],
    max_bytes: int,
) -> list[Split]:
    """Splits of one partition from its walk: (segment, lo, hi) with ``lo < hi``."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    splits: list[Split] = []
    for ref, lo, hi in walk:
        if lo >= hi:
            continue
        # Never more parts than offsets (a tiny range under a large minPartitions).
        offsets = min(hi, ref.end_offset + 1) - max(lo, ref.start_offset)
        parts = max(1, min(-(-share_bytes(ref, lo, hi) // max_bytes), offsets))
        splits += [Split(topic, partition, ref, lo, hi, k, parts) for k in range(parts)]
    return splits


def _first_slot_at_or_after(index: OffsetIndex, offset: int) -> int:
    """The first entry whose offset is >= ``offset`` (``len(index)`` when none)."""
    lo, hi = 0, len(index)
    while lo < hi:
        mid = (lo + hi) >> 1
        if index.entry(mid).offset < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def region(split: Split, index: OffsetIndex | None) -> tuple[int, int]:
    """Bytes ``[A, B)`` of the segment holding every batch with offsets in the split's
    ``[start_offset, end_offset)`` (``index`` may be None only for a whole segment)."""
    seg = split.segment
    if index is None:
        if not split.whole_segment:
            raise ValueError("a partial or split segment needs its offset index")
        return 0, seg.size
    start = 0 if split.start_offset <= seg.start_offset else index.lookup(split.start_offset)[1]
    end = seg.size
    if split.end_offset <= seg.end_offset:
        # The entry covering end_offset - 1: every batch after the *next* entry starts later.
        slot = _first_slot_at_or_after(index, split.end_offset - 1) + 1
        if slot < len(index):
            end = index.entry(slot).position
    if not 0 <= start <= end <= seg.size:
        raise CorruptIndexError(
            f"{seg.key}: offset index positions [{start}, {end}) are outside the segment's "
            f"{seg.size} bytes"
        )
    return start, end


def start_entry(index: OffsetIndex | None, position: int) -> int:
    """The offset of the offset-index entry whose position a read from ``position`` starts at
    (-1 for byte 0: the segment's first batch, checked against its start offset instead).
    Every split starts at byte 0 or at an entry's position (:func:`split_byte_range`)."""
    if position == 0:
        return -1
    found = None if index is None else index.fetch_upper_bound_offset(position)
    if found is None or found.position != position:
        raise ValueError(f"byte {position} is not the position of an offset-index entry")
    return found.offset


def split_byte_range(split: Split, index: OffsetIndex | None) -> tuple[int, int]:
    """Bytes ``[c_k, c_k+1)`` this split reads (empty when ``c_k == c_k+1``)."""
    start, end = region(split, index)
    if split.parts == 1:
        return start, end
    assert index is not None  # region() refused a split segment without one
    cuts = [start]
    for k in range(1, split.parts):
        target = start + (end - start) * k // split.parts
        found = index.fetch_upper_bound_offset(target)
        position = end if found is None else found.position
        cuts.append(min(max(position, cuts[-1]), end))
    cuts.append(end)
    return cuts[split.part], cuts[split.part + 1]
