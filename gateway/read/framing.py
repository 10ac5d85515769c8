"""Strict framing of one remote segment: every batch proves where it sits.

A tiered segment was rolled and closed before it was uploaded (``remote-read-semantics.md``
§15a), so unlike the broker's ``RemoteLogInputStream`` nothing about it may be "truncated":

* a batch that runs past the segment's size, bytes after the last whole batch, a length below
  the v2 header or a magic other than 2 are corruption;
* offsets are contiguous: the first batch read from byte 0 starts at the segment's
  ``startOffset``, every batch starts one past the previous one's last offset, and every offset
  lies in ``[startOffset, endOffset]``;
* reading to the end of the segment arrives at ``endOffset`` exactly;
* a read that starts at an offset-index entry ``(O, P)`` finds a batch at ``P`` that starts at or
  before ``O`` (the entry was written as the batch's last offset, so a later batch means the
  entry points past records a fetch of ``O`` must return);
* ``partitionLeaderEpoch`` (outside the CRC) equals the epoch the segment's leader-epoch map gives
  the batch's base offset.

The CRC is the caller's to check on the batches it serves (:meth:`RecordBatch.ensure_valid`);
``baseOffset`` and ``partitionLeaderEpoch`` are not covered by it, which is why they are checked
here against what the metadata promises. Pure code, no I/O: the service, the Spark executors and
scrub feed it the bytes they read.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from gateway.errors import CorruptRecordError
from gateway.kafka.batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH_V2,
    PEEK,
    PEEK_SIZE,
    RecordBatch,
)

_NONE: Final = -1


class Rule(StrEnum):
    """Which promise a :class:`FramingError` found broken."""

    FRAMING = "framing"  # magic, length, a batch past the end, bytes after the last batch
    OFFSETS = "offsets"  # start, contiguity, range, the end at ``endOffset``
    LEADER_EPOCH = "leader-epoch"
    INDEX_ENTRY = "index-entry"  # the batch an offset-index entry points at starts after it


class FramingError(CorruptRecordError):
    """A remote segment breaks a promise of its metadata; ``rule`` says which, ``position``
    where (a byte position in the segment)."""

    def __init__(self, message: str, rule: Rule, position: int) -> None:
        super().__init__(message)
        self.rule = rule
        self.position = position


@dataclass(frozen=True, slots=True)
class SegmentBounds:
    """What the metadata promises about one remote segment."""

    key: str  # the ``.log`` object key, for messages
    start_offset: int
    end_offset: int  # inclusive
    size: int  # the original ``.log`` size in bytes
    epochs: tuple[tuple[int, int], ...] = ()  # (epoch, start offset), ascending
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The framer asks once per batch: the search keys are built once per segment.
        object.__setattr__(self, "_starts", tuple(start for _, start in self.epochs))

    def epoch_for(self, offset: int) -> int | None:
        """The leader epoch of ``offset`` by the segment's map (``None`` when the map is empty
        or starts after ``offset``)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self.epochs[i][0] if i >= 0 else None


class SegmentFramer:
    """Frames a segment's bytes from a batch boundary, fed in order, checking as it goes.

    ``position`` is where framing starts: 0, the position of the offset-index entry whose
    offset is ``entry_offset``, or the end of a batch already framed (``after``). Feed
    consecutive pieces with :meth:`feed`; :attr:`need` says how many more bytes complete the
    pending batch (for sizing the next read); :meth:`finish` runs the end checks once the
    segment's last byte has been fed.
    """

    __slots__ = (
        "_pending",
        "_pending_pos",
        "bounds",
        "cursor",
        "entry_offset",
        "last_offset",
        "need",
        "start",
    )

    def __init__(
        self,
        bounds: SegmentBounds,
        position: int = 0,
        entry_offset: int = _NONE,
        *,
        after: int = _NONE,
    ) -> None:
        """``after``: resume framing right after a batch that ended at offset ``after`` (its
        successor must start at ``after + 1``)."""
        if not 0 <= position <= bounds.size:
            raise CorruptRecordError(
                f"{bounds.key}: a read would start at byte {position}, outside the segment's "
                f"{bounds.size} bytes"
            )
        self.bounds = bounds
        self.start = position
        self.entry_offset = entry_offset
        self.cursor = position  # segment position of the next byte to feed
        self.last_offset = after  # last offset of the last batch framed
        self.need = PEEK_SIZE
        self._pending = b""
        self._pending_pos = position

    @property
    def at_end(self) -> bool:
        return self.cursor >= self.bounds.size

    def _fail(self, pos: int, what: str, rule: Rule = Rule.FRAMING) -> FramingError:
        return FramingError(f"{self.bounds.key}: record batch at byte {pos} {what}", rule, pos)

    def feed(self, data: bytes | memoryview) -> list[RecordBatch]:
        """The whole batches completed by ``data`` (the segment's bytes from :attr:`cursor`).
        Their ``position`` is their byte position in the segment."""
        if not data:
            return []
        size = self.bounds.size
        if self.cursor + len(data) > size:
            raise CorruptRecordError(
                f"{self.bounds.key}: {self.cursor + len(data)} bytes read from a "
                f"{size}-byte segment"
            )
        self.cursor += len(data)
        buf = self._pending + bytes(data) if self._pending else data
        view = memoryview(buf)
        base = self._pending_pos
        end = len(view)
        i = 0
        out: list[RecordBatch] = []
        while end - i >= PEEK_SIZE:
            pos = base + i
            _base_offset, length, _epoch, magic = PEEK.unpack_from(view, i)
            if magic != MAGIC_V2:
                raise self._fail(pos, f"has magic {magic}: a remote segment holds v2 batches only")
            if length < MIN_BATCH_LENGTH_V2:
                raise self._fail(pos, f"has length {length}, below the v2 minimum")
            total = LOG_OVERHEAD + length
            if pos + total > size:
                raise self._fail(
                    pos, f"runs {pos + total - size} bytes past the segment's {size}-byte end"
                )
            if i + total > end:
                break
            batch = RecordBatch(view[i : i + total], pos)
            self._check(batch)
            out.append(batch)
            i += total
        rest = end - i
        self.need = (
            PEEK_SIZE - rest
            if rest < PEEK_SIZE
            else LOG_OVERHEAD + PEEK.unpack_from(view, i)[1] - rest
        )
        self._pending = bytes(view[i:]) if rest else b""
        self._pending_pos = base + i
        return out

    def _check(self, batch: RecordBatch) -> None:
        b = self.bounds
        pos, first, last = batch.position, batch.base_offset, batch.last_offset
        if self.last_offset == _NONE:
            if pos == 0 and first != b.start_offset:
                raise self._fail(
                    pos,
                    f"starts at offset {first}; the segment starts at {b.start_offset}",
                    Rule.OFFSETS,
                )
            if pos > 0 and first > self.entry_offset:
                raise self._fail(
                    pos,
                    f"starts at offset {first}, after the offset-index entry "
                    f"({self.entry_offset}, {pos}) that points at it: a corrupt index",
                    Rule.INDEX_ENTRY,
                )
        elif first != self.last_offset + 1:
            raise self._fail(
                pos,
                f"has offsets {first}..{last}; the previous batch ended at {self.last_offset} "
                "(offsets in a segment are contiguous)",
                Rule.OFFSETS,
            )
        if last < first or first < b.start_offset or last > b.end_offset:
            raise self._fail(
                pos,
                f"has offsets {first}..{last}, outside the segment's "
                f"{b.start_offset}..{b.end_offset}",
                Rule.OFFSETS,
            )
        if b.epochs:
            epoch = b.epoch_for(first)
            if batch.partition_leader_epoch != epoch:
                raise self._fail(
                    pos,
                    f"(offset {first}) carries leader epoch {batch.partition_leader_epoch}; the "
                    f"segment's leader-epoch map gives {epoch}",
                    Rule.LEADER_EPOCH,
                )
        self.last_offset = last

    def finish(self) -> None:
        """The segment's last byte has been fed: nothing may be left over, and the last batch
        must end at the segment's ``endOffset``."""
        b = self.bounds
        if not self.at_end:
            raise CorruptRecordError(f"{b.key}: the read ended at byte {self.cursor} of {b.size}")
        if self._pending:
            raise self._fail(
                self._pending_pos,
                f"is cut off: {len(self._pending)} bytes before the segment's end do not form "
                "a whole batch",
            )
        if self.last_offset != b.end_offset:
            got = "no batch" if self.last_offset == _NONE else f"offset {self.last_offset}"
            raise FramingError(
                f"{b.key}: the segment's batches end at {got}; its metadata says {b.end_offset}",
                Rule.OFFSETS,
                self.cursor,
            )
