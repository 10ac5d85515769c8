"""ListOffsets on the remote tier (``remote-read-semantics.md`` §12).

* ``earliest``: the remote log start offset, its epoch; timestamp -1.
* ``latest``: one past the highest remote offset (the remote tier's log end), the latest epoch;
  timestamp -1.
* ``max_timestamp``: the segment with the largest max timestamp (the first such), then in it
  the first batch with that max timestamp and the first record carrying it
  (``offsetOfMaxTimestamp``); the batch's epoch.
* a timestamp T >= 0 (``findOffsetByTimestamp``): epochs in ascending order from the epoch of
  the remote start; per epoch the first finished segment (by start offset) with
  ``maxTimestampMs >= T`` and ``endOffset >= start``; in it the time index gives (T', O), the
  offset index the position of ``max(start, O)``, and the first record with timestamp >= T
  (the batch's max timestamp under LOG_APPEND_TIME) and offset >= start answers, with its
  batch's leader epoch. Control records count, as in Kafka. Nothing found: (-1, -1, none).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch, iter_batches
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition
from gateway.service.fetch import remote_bounds
from gateway.service.segments import SegmentSource
from gateway.service.types import OffsetResult
from gateway.storage.retry import Deadline

NOT_FOUND = OffsetResult(-1, -1, None)
_WINDOW = 1 << 20


def _epoch(batch: RecordBatch) -> int | None:
    return batch.partition_leader_epoch if batch.partition_leader_epoch >= 0 else None


def scan_window(
    buf: bytes, meta: RemoteLogSegmentMetadata, timestamp: int, start: int
) -> tuple[OffsetResult | None, int]:
    """The first record at or after ``timestamp`` and ``start`` among the whole batches of
    ``buf``, and how many bytes of whole batches were looked at (CPU: a worker thread)."""
    consumed = 0
    for batch in iter_batches(buf, offset_range=(meta.start_offset, meta.end_offset)):
        consumed = batch.position + batch.size_in_bytes
        if batch.max_timestamp < timestamp or batch.last_offset < start:
            continue
        log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
        for record in batch.records():  # checks the CRC first
            ts = batch.max_timestamp if log_append else record.timestamp
            if ts >= timestamp and record.offset >= start:
                return OffsetResult(record.offset, ts, _epoch(batch)), consumed
    return None, consumed


def timestamp_segment(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, timestamp: int
) -> tuple[RemoteLogSegmentMetadata, int] | None:
    """The segment ``findOffsetByTimestamp`` searches for ``timestamp`` and the remote log
    start offset (RLMM reads only; shared with the Spark planner)."""
    start, end = remote_bounds(rlmm, tp)
    if end == 0:
        return None
    lineage = rlmm.epoch_lineage(tp)
    first_epoch = rlmm.epoch_for_offset(tp, start)
    epochs = [e.epoch for e in lineage if first_epoch is None or e.epoch >= first_epoch]
    for epoch in epochs:
        for meta in rlmm.list_remote_log_segments(tp, epoch):
            if (
                meta.max_timestamp_ms >= timestamp
                and meta.end_offset >= start
                and meta.state is SegmentState.COPY_SEGMENT_FINISHED
            ):
                return meta, start
    return None


class OffsetFinder:
    def __init__(
        self, rlmm: RemoteLogMetadataManager, source: SegmentSource, executor: Executor
    ) -> None:
        self._rlmm = rlmm
        self._source = source
        self._executor = executor

    def earliest(self, tp: TopicIdPartition) -> OffsetResult:
        start, end = remote_bounds(self._rlmm, tp)
        if end == 0:
            return NOT_FOUND
        return OffsetResult(start, -1, self._rlmm.epoch_for_offset(tp, start))

    def latest(self, tp: TopicIdPartition) -> OffsetResult:
        _, end = remote_bounds(self._rlmm, tp)
        lineage = self._rlmm.epoch_lineage(tp)
        return OffsetResult(end, -1, lineage[-1].epoch if lineage else None)

    def _max_timestamp_segment(
        self, tp: TopicIdPartition
    ) -> tuple[RemoteLogSegmentMetadata, int] | None:
        finished = [
            m
            for m in self._rlmm.list_remote_log_segments(tp)
            if m.state is SegmentState.COPY_SEGMENT_FINISHED
        ]
        if not finished:
            return None
        best = max(finished, key=lambda m: (m.max_timestamp_ms, -m.start_offset))
        return best, remote_bounds(self._rlmm, tp)[0]

    async def max_timestamp(self, tp: TopicIdPartition, deadline: Deadline) -> OffsetResult:
        picked = await asyncio.to_thread(self._max_timestamp_segment, tp)
        if picked is None:
            return NOT_FOUND
        best, start = picked
        # The first record carrying the segment's max timestamp is the first record at or
        # after it: the time index finds its neighbourhood (``offsetOfMaxTimestamp``).
        return await self._search(best, best.max_timestamp_ms, start, deadline)

    async def for_timestamp(
        self, tp: TopicIdPartition, timestamp: int, deadline: Deadline
    ) -> OffsetResult:
        picked = await asyncio.to_thread(timestamp_segment, self._rlmm, tp, timestamp)
        if picked is None:
            return NOT_FOUND
        return await self._search(picked[0], timestamp, picked[1], deadline)

    async def _search(
        self, meta: RemoteLogSegmentMetadata, timestamp: int, start: int, deadline: Deadline
    ) -> OffsetResult:
        """Read the segment window by window from the index position; stop at the first hit."""
        indexes = await self._source.indexes(meta, deadline)
        found = indexes.lookup_timestamp(timestamp)
        cursor = indexes.lookup_offset(max(start, found.offset, meta.start_offset)).position
        loop = asyncio.get_running_loop()
        pending = b""
        while True:
            data, size = await self._source.read(meta, cursor, cursor + _WINDOW, deadline)
            buf = pending + data
            hit, consumed = await loop.run_in_executor(
                self._executor, scan_window, buf, meta, timestamp, start
            )
            if hit is not None:
                return hit
            cursor += len(data)
            if cursor >= size or not data:
                return NOT_FOUND
            pending = buf[consumed:]
