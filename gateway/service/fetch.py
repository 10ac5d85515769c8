"""FETCH from the remote tier with Kafka's read semantics (``remote-read-semantics.md`` §7, §8).

Per segment (``RemoteLogManager.read``): the epoch lineage picks the segment holding the
offset, the offset index gives the start position (floor), batches are framed from there and
every batch whose last offset is below the fetch offset is skipped; the first batch returned is
the first whose last offset is at or after it (it may start before it). Where this gateway goes
further than the broker, deliberately:

* whole batches only, and at least one batch even when it is larger than ``max_bytes`` (the
  broker's minOneMessage), so a response is never a silent empty 200;
* when ``max_bytes`` leaves room, the response continues into the following segments (the
  broker stops at the segment end); when a segment holds no batch at or after the offset, the
  read moves on to the next segment (the broker from 3.8 on);
* every answer proves itself complete (:mod:`gateway.read`): segments are framed strictly (no
  truncated tail in a closed segment, contiguous offsets, the leader epoch, the offset-index
  entry a read starts from, the segment's end at its ``endOffset``), indexes are checked against
  the metadata before use, the next segment must start right after the previous one ends (a
  hole is :class:`RemoteGapError`, never hopped over; a manifest the scan could not read claims
  its range), and every returned batch has its CRC checked;
* read_committed (:mod:`gateway.service.committed`) is checked against the control records.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cachetools import LRUCache

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import (
    CorruptDataError,
    CorruptManifestError,
    GatewayError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    RemoteGapError,
    add_context,
)
from gateway.kafka.batch import RecordBatch
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition
from gateway.read.framing import SegmentBounds, SegmentFramer
from gateway.remote.keys import Suffix
from gateway.service.types import FetchedBatches
from indexcache import SegmentIndexes

MIN_WINDOW = 64 * 1024
MAX_WINDOW = 8 * 1024 * 1024


class Claim(Protocol):
    """What a segment whose manifest the scan could not read still tells: its start offset
    and its manifest key (``gateway.metadata.scan.UnreadableSegment``)."""

    @property
    def start_offset(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def reason(self) -> str: ...


Claims = Callable[[TopicIdPartition], Sequence[Claim]]


def resolve(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    """The finished segment for ``offset``: through the epoch lineage as the broker does, else
    the first finished segment that ends at or after it (which starts after ``offset`` when
    the offset lies in a hole: the caller checks)."""
    epoch = rlmm.epoch_for_offset(tp, offset)
    if epoch is not None:
        found = rlmm.remote_log_segment_metadata(tp, epoch, offset)
        if found is not None:
            return found
    for meta in rlmm.list_remote_log_segments(tp):
        if meta.state is SegmentState.COPY_SEGMENT_FINISHED and meta.end_offset >= offset:
            return meta
    return None


def remote_bounds(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> tuple[int, int]:
    """(log start offset, log end offset = one past the highest remote offset)."""
    start = rlmm.remote_log_start_offset(tp)
    end = rlmm.remote_log_end_offset(tp)
    if start is None or end is None:
        return 0, 0
    return start, end + 1


def segment_bounds(meta: RemoteLogSegmentMetadata, key: str) -> SegmentBounds:
    return SegmentBounds(
        key,
        meta.start_offset,
        meta.end_offset,
        meta.segment_size_in_bytes,
        tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1])),
    )


class SegmentVanishedError(ObjectNotFoundError):
    """An object of a listed segment is missing (retention may have deleted the segment under
    the read); names the segment so the caller can check and re-resolve."""

    def __init__(self, message: str, meta: RemoteLogSegmentMetadata) -> None:
        super().__init__(message)
        self.meta = meta


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Whole batches read from one segment."""

    meta: RemoteLogSegmentMetadata
    position: int  # byte position of the first batch in the segment
    data: bytes
    first_offset: int
    last_offset: int

    @property
    def end_position(self) -> int:
        return self.position + len(self.data)


class Fetcher:
    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        source: SegmentSource,
        claims: Claims | None = None,
    ) -> None:
        self.rlmm = rlmm
        self._source = source
        self.claims: Claims = claims if claims is not None else (lambda tp: ())
        self._tails: LRUCache[TopicIdPartition, int] = LRUCache(maxsize=100_000)

    async def check_tail(self, tp: TopicIdPartition, end: int, deadline: Deadline) -> None:
        """The log end an answer reports is the last segment's ``endOffset + 1``: before it is
        first reported, the last segment's bytes from its last offset-index entry to its end
        are framed, so the end is one the data keeps (remembered per partition and end)."""
        if end == 0 or self._tails.get(tp) == end:
            return
        meta = await asyncio.to_thread(resolve, self.rlmm, tp, end - 1)
        if meta is None or meta.end_offset != end - 1:
            return  # the answer's own reads meet whatever this is
        framer = self.framer(meta, await self.indexes(meta, deadline), meta.end_offset)
        async for _ in self.batches(meta, framer, MIN_WINDOW, deadline):
            pass  # the end checks run when the last byte is fed
        self._tails[tp] = end

    # --- where the offsets are -----------------------------------------------------------

    def _locate(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
        """The segment holding ``offset`` (RLMM reads: call it off the event loop).

        Outside the remote log: :class:`OffsetOutOfRangeError`. A hole in the metadata inside
        it: :class:`RemoteGapError`. Offsets a segment whose manifest cannot be read would
        hold (from its key's start offset to the next readable segment), inside the remote log,
        before its start or after its end: :class:`CorruptManifestError` naming the manifest.
        """
        rlmm = self.rlmm
        start, end = remote_bounds(rlmm, tp)
        where = f"{tp.topic}-{tp.partition}"
        meta = resolve(rlmm, tp, offset) if start <= offset < end else None
        if meta is not None and meta.start_offset <= offset:
            return meta
        # Not held by a readable segment. What starts before ``offset`` and covers least?
        readable_end = max(
            (m.end_offset for m in rlmm.list_remote_log_segments(tp) if m.end_offset < offset),
            default=-1,
        )
        claims = [c for c in self.claims(tp) if readable_end < c.start_offset <= offset]
        if claims:
            claim = claims[-1]
            raise CorruptManifestError(
                f"offset {offset} of {where} is in the segment from offset {claim.start_offset} "
                f"whose manifest {claim.key} cannot be read ({claim.reason})"
            )
        if meta is None and start <= offset < end:
            end = readable_end + 1  # the tail was deleted: nothing readable holds offsets here
        if start <= offset < end and meta is not None:
            hole_end = meta.start_offset - 1
            raise RemoteGapError(
                f"no remote segment of {where} holds offsets {offset}..{hole_end}, inside the "
                f"remote log [{start}, {end}): the metadata has a hole",
                offset,
                hole_end,
            )
        claimed = [c.start_offset for c in self.claims(tp)]
        log_start = min([start, *claimed]) if end else min(claimed, default=0)
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the remote log of {where} [{log_start}, {end})",
            log_start,
            end,
        )

    def next_segment(
        self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata
    ) -> RemoteLogSegmentMetadata | None:
        """The segment after ``meta``: it must hold ``endOffset + 1``; ``None`` at the end of
        the remote log."""
        try:
            return self._locate(tp, meta.end_offset + 1)
        except OffsetOutOfRangeError:
            return None

    async def fetch(
        self, tp: TopicIdPartition, offset: int, max_bytes: int, deadline: Deadline
    ) -> tuple[list[SegmentRead], int]:
        """Batches from ``offset`` and the next offset to fetch (one past the last offset
        considered). RLMM reads are SQLite calls and run off the event loop.

        At exactly the remote log end: no batches and ``offset`` itself, as Kafka answers a
        fetch at the high watermark; past it, :class:`OffsetOutOfRangeError`."""
        meta: RemoteLogSegmentMetadata | None
        try:
            meta = await asyncio.to_thread(self._locate, tp, offset)
        except OffsetOutOfRangeError as exc:
            if offset != exc.log_end_offset:
                raise
            _, end = await asyncio.to_thread(remote_bounds, self.rlmm, tp)
            if offset != end:  # e.g. the tail is being deleted: not the end the answer says
                raise
            return [], offset
        reads: list[SegmentRead] = []
        budget, target, next_offset = max_bytes, offset, offset
        while meta is not None:
            try:
                read, full = await self._read_segment(meta, target, budget, not reads, deadline)
            except GatewayError as exc:
                if reads:  # what was read stands; the next fetch meets the failure first
                    break
                if isinstance(exc, ObjectNotFoundError):
                    raise SegmentVanishedError(str(exc), meta) from exc
                raise
            if read is not None:
                reads.append(read)
                budget -= len(read.data)
                target = next_offset = read.last_offset + 1
            if full:
                break  # the budget ended inside this segment
            # The rest of the segment was read to its end (an empty one is hopped over, 3.8+).
            next_offset = max(next_offset, meta.end_offset + 1)
            target = max(target, meta.end_offset + 1)
            if budget <= 0:
                break
            try:
                meta = await asyncio.to_thread(self.next_segment, tp, meta)
            except GatewayError:
                if reads:
                    break
                raise
        return reads, next_offset

    # --- one segment ---------------------------------------------------------------------

    def object_key(self, meta: RemoteLogSegmentMetadata) -> str:
        """The segment's ``.log`` object key."""
        return self._source.object_key(meta).key

    async def indexes(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> SegmentIndexes:
        """The segment's indexes, checked against its metadata before they are trusted."""
        indexes = await self._source.indexes(meta, deadline)
        end, size = meta.end_offset, meta.segment_size_in_bytes
        if not indexes.checked_against(end, size):
            what = self._source.object_key(meta).with_suffix(Suffix.INDEXES).key
            try:
                await asyncio.to_thread(indexes.check_against, end, size)
            except CorruptDataError as exc:
                add_context(exc, what)
                raise
        return indexes

    async def batches(
        self,
        meta: RemoteLogSegmentMetadata,
        framer: SegmentFramer,
        window: int,
        deadline: Deadline,
        *,
        grow: bool = False,
    ) -> AsyncIterator[list[RecordBatch]]:
        """The segment's batches window by window from ``framer``'s cursor, to its end
        (checked there); windows double up to ``MAX_WINDOW`` when ``grow``. Every iteration
        consumes bytes or fails: no loop without progress."""
        key = framer.bounds.key
        while not framer.at_end:
            if grow:
                window = min(window * 2, MAX_WINDOW)
            cursor = framer.cursor
            want = max(window, framer.need)
            try:
                data, size = await self._source.read(meta, cursor, cursor + want, deadline)
                if size != framer.bounds.size:
                    raise CorruptManifestError(
                        f"{key}: the manifest says {size} bytes, the segment metadata "
                        f"{framer.bounds.size}"
                    )
                if not data:
                    raise CorruptDataError(f"{key}: no bytes at {cursor} of {size}")
                out = framer.feed(data)
                if framer.at_end:
                    framer.finish()
            except CorruptDataError as exc:
                # The cache may hold the bad bytes (an untransformed chunk is only checked
                # here): drop them, so a retry reads the object again.
                await self._source.chunks.invalidate(meta.segment_id.id)
                if str(exc).startswith(key):
                    raise
                add_context(exc, f"{key} (read from byte {cursor})")
                raise
            yield out

    def framer(
        self, meta: RemoteLogSegmentMetadata, indexes: SegmentIndexes, target: int
    ) -> SegmentFramer:
        """A framer from the offset-index floor of ``target``."""
        entry = indexes.lookup_offset(max(target, meta.start_offset))
        return SegmentFramer(
            segment_bounds(meta, self.object_key(meta)), entry.position, entry.offset
        )

    async def _read_segment(
        self,
        meta: RemoteLogSegmentMetadata,
        target: int,
        budget: int,
        min_one: bool,
        deadline: Deadline,
    ) -> tuple[SegmentRead | None, bool]:
        """Whole batches of one segment from the first ending at or after ``target``, within
        ``budget`` (one batch at least when ``min_one``); and whether the budget ended here."""
        framer = self.framer(meta, await self.indexes(meta, deadline), target)
        window = min(max(budget, MIN_WINDOW), MAX_WINDOW)
        out: list[bytes] = []
        total, first_pos, first_off, last_off = 0, -1, -1, -1

        def done(full: bool) -> tuple[SegmentRead | None, bool]:
            if not out:
                return None, full
            return SegmentRead(meta, first_pos, b"".join(out), first_off, last_off), full

        async for batches in self.batches(meta, framer, window, deadline):
            for batch in batches:
                if batch.last_offset < target:
                    continue
                size_b = batch.size_in_bytes
                if total + size_b > budget and (out or not min_one):
                    return done(True)
                try:
                    batch.ensure_valid()
                except CorruptDataError as exc:
                    await self._source.chunks.invalidate(meta.segment_id.id)
                    add_context(exc, framer.bounds.key)
                    raise
                if not out:
                    first_pos, first_off = batch.position, batch.base_offset
                out.append(bytes(batch.view))
                total += size_b
                last_off = batch.last_offset
                if total >= budget:
                    end_here = batch.last_offset == meta.end_offset and framer.at_end
                    return done(not end_here)
        return done(False)


def to_batches(reads: list[SegmentRead]) -> tuple[FetchedBatches, ...]:
    return tuple(
        FetchedBatches(r.meta.start_offset, r.data, r.first_offset, r.last_offset) for r in reads
    )
