"""FETCH from the remote tier with Kafka's read semantics (``remote-read-semantics.md`` §7, §8).

Per segment (``RemoteLogManager.read``): the epoch lineage picks the segment holding the
offset, the offset index gives the start position (floor), batches are framed from there and
every batch whose last offset is below the fetch offset is skipped; the first batch returned is
the first whose last offset is at or after it (it may start before it). Where this gateway goes
further than the broker, deliberately:

* whole batches only, never a truncated tail, and at least one batch even when it is larger
  than ``max_bytes`` (the broker's minOneMessage), so a response is never a silent empty 200;
* when ``max_bytes`` leaves room, the response continues into the following segments (the
  broker stops at the segment end); when a segment holds no batch at or after the offset, the
  read moves on to the next segment (the broker from 3.8 on);
* a gap between segments (missing uploads) is stepped over to the next segment;
* every returned batch has its CRC checked: stored bytes that fail are never served.

read_committed collects aborted transactions as §8 does: from the first batch's base offset to
the upper bound (the first offset-index entry at or after the end of what was read in the last
segment, else that segment's end + 1), walking transaction indexes from the first segment read
onwards until one search is complete; segments whose transaction index is empty are skipped
without a GET (KAFKA-16780), and the end of the remote tier counts as complete.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from gateway.errors import (
    CorruptDataError,
    GatewayError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
)
from gateway.kafka.batch import LOG_OVERHEAD, iter_batches
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition
from gateway.service.segments import SegmentSource
from gateway.service.types import AbortedTransaction, FetchedBatches
from gateway.storage.retry import Deadline

MIN_WINDOW = 64 * 1024
MAX_WINDOW = 8 * 1024 * 1024
_LENGTH = struct.Struct(">i")


def resolve(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    """The finished segment for ``offset``: through the epoch lineage as the broker does, else
    (an offset in a gap, or one the lineage does not place) the first finished segment that
    ends at or after it."""
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


class Fetcher:
    def __init__(self, rlmm: RemoteLogMetadataManager, source: SegmentSource) -> None:
        self._rlmm = rlmm
        self._source = source

    async def fetch(
        self, tp: TopicIdPartition, offset: int, max_bytes: int, deadline: Deadline
    ) -> tuple[list[SegmentRead], int]:
        """Batches from ``offset`` and the next offset to fetch (one past the last offset
        considered). RLMM reads are SQLite calls and run off the event loop."""
        rlmm = self._rlmm
        start, end = await asyncio.to_thread(remote_bounds, rlmm, tp)
        meta = await asyncio.to_thread(resolve, rlmm, tp, offset) if start <= offset < end else None
        if meta is None:  # outside the remote log, or nothing covers it any more (deleted)
            where = f"the remote log of {tp.topic}-{tp.partition} [{start}, {end})"
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {where}"
                if not start <= offset < end
                else f"no remote segment holds offset {offset} of {where} any more (deleted)",
                start,
                end,
            )
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
            # The rest of the segment was considered (an empty one is hopped over, as 3.8+).
            next_offset = max(next_offset, meta.end_offset + 1)
            target = max(target, meta.end_offset + 1)
            if budget <= 0:
                break
            meta = await asyncio.to_thread(resolve, rlmm, tp, meta.end_offset + 1)
        return reads, next_offset

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
        indexes = await self._source.indexes(meta, deadline)
        cursor = indexes.lookup_offset(max(target, meta.start_offset)).position
        window = min(max(budget, MIN_WINDOW), MAX_WINDOW)
        pending = b""  # bytes of a batch cut by the end of the last window
        out: list[bytes] = []
        total, first_pos, first_off, last_off = 0, -1, -1, -1
        prev_last = -1
        key = self._source.object_key(meta).key

        def done(full: bool) -> tuple[SegmentRead | None, bool]:
            if not out:
                return None, full
            return SegmentRead(meta, first_pos, b"".join(out), first_off, last_off), full

        while True:
            want = window
            if len(pending) >= LOG_OVERHEAD:
                want = max(want, LOG_OVERHEAD + _LENGTH.unpack_from(pending, 8)[0] - len(pending))
            data, size = await self._source.read(meta, cursor, cursor + want, deadline)
            at_end = cursor + len(data) >= size
            buf = pending + data if pending else data
            base = cursor - len(pending)
            consumed = 0
            try:
                for batch in iter_batches(buf, offset_range=(meta.start_offset, meta.end_offset)):
                    consumed = batch.position + batch.size_in_bytes
                    if batch.base_offset <= prev_last:
                        raise CorruptDataError(
                            f"batch at {base + batch.position} has offsets not after {prev_last}"
                        )
                    prev_last = batch.last_offset
                    if batch.last_offset < target:
                        continue
                    size_b = batch.size_in_bytes
                    if total + size_b > budget and (out or not min_one):
                        return done(True)
                    batch.ensure_valid()
                    if not out:
                        first_pos, first_off = base + batch.position, batch.base_offset
                    out.append(bytes(batch.view))
                    total += size_b
                    last_off = batch.last_offset
                    if total >= budget:
                        return done(not (at_end and consumed == len(buf)))
            except CorruptDataError as exc:
                # The cache may hold the bad bytes (an untransformed chunk is only checked
                # here): drop them, so a retry reads the object again.
                await self._source.chunks.invalidate(meta.segment_id.id)
                raise type(exc)(f"{key} (read from byte {base}): {exc}") from exc
            if at_end:  # a truncated tail at the segment end ends the stream, as in Kafka
                return done(False)
            pending = bytes(memoryview(buf)[consumed:])
            cursor += len(data)

    async def aborted_transactions(
        self, tp: TopicIdPartition, reads: list[SegmentRead], deadline: Deadline
    ) -> list[AbortedTransaction]:
        """§8 over what was read (see the module docstring)."""
        if not reads:
            return []
        last = reads[-1]
        indexes = await self._source.indexes(last.meta, deadline)
        bound = indexes.upper_bound_at(last.position + len(last.data))
        upper = bound.offset if bound is not None else last.meta.end_offset + 1
        fetch_offset = reads[0].first_offset
        found: set[tuple[int, int]] = set()
        meta: RemoteLogSegmentMetadata | None = reads[0].meta
        while meta is not None:
            if not meta.txn_index_empty:
                indexes = await self._source.indexes(meta, deadline)
                result = indexes.aborted_txns(fetch_offset, upper)
                found.update((t.producer_id, t.first_offset) for t in result.aborted_transactions)
                if result.is_complete:
                    break
            meta = await asyncio.to_thread(self._next_with_txn_index, tp, meta.end_offset + 1)
        return [AbortedTransaction(pid, first) for pid, first in sorted(found, key=lambda t: t[1])]

    def _next_with_txn_index(
        self, tp: TopicIdPartition, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The next segment from ``offset`` whose transaction index is not empty (one thread
        hop for the whole skip, however many empty ones there are)."""
        meta = resolve(self._rlmm, tp, offset)
        while meta is not None and meta.txn_index_empty:
            meta = resolve(self._rlmm, tp, meta.end_offset + 1)
        return meta


def to_batches(reads: list[SegmentRead]) -> tuple[FetchedBatches, ...]:
    return tuple(
        FetchedBatches(r.meta.start_offset, r.data, r.first_offset, r.last_offset) for r in reads
    )
