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

Earliest, latest and a timestamp are refused (``corrupt_checkpoint``) while the partition's
leader-epoch lineage is in doubt (:func:`check_epochs`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import CorruptCheckpointError, CorruptManifestError
from gateway.kafka.batch import RecordBatch
from gateway.metadata.lineage import check_lineage
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition
from gateway.read.timesearch import TimestampHit, TimestampSearch
from gateway.remote.keys import Suffix
from gateway.service.fetch import Fetcher
from gateway.service.locate import remote_bounds, resolve
from gateway.service.types import OffsetResult

NOT_FOUND = OffsetResult(-1, -1, None)
_WINDOW = 1 << 20


def _epoch(batch: RecordBatch) -> int | None:
    return batch.partition_leader_epoch if batch.partition_leader_epoch >= 0 else None


def check_epochs(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> None:
    """Refuse an answer that carries or depends on the leader-epoch lineage while it is in
    doubt: the partition's newest checkpoint disagreed with the segments' epoch maps, so one
    of them is damaged (:meth:`~gateway.metadata.views.MetadataViews.lineage_dispute`), and it
    still does (checked again here, against the catalog as it is now: a repaired manifest or
    a deleted segment settles it). From the epoch maps alone, a damaged map gave EARLIEST and
    LATEST another epoch and a timestamp search no offset (-1) where the written log has
    one. Blocking (catalog reads)."""
    try:
        rlmm.recheck_dispute(tp, check_lineage)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(
            f"{tp.topic}-{tp.partition}: the leader epochs of the remote log are in doubt, so "
            f"answers that carry or depend on them are refused: {exc}"
        ) from exc


def timestamp_segment(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, timestamp: int
) -> tuple[RemoteLogSegmentMetadata, int] | None:
    """The segment ``findOffsetByTimestamp`` searches for ``timestamp`` and the remote log
    start offset (RLMM reads only; shared with the Spark planner). Its callers refuse the
    answer while the epoch lineage is in doubt (:func:`check_epochs`), after their check of
    the unreadable manifests the search passed over (the error naming one is the sharper)."""
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


def _last_segment(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition
) -> RemoteLogSegmentMetadata | None:
    _, end = remote_bounds(rlmm, tp)
    return resolve(rlmm, tp, end - 1) if end > 0 else None


class OffsetFinder:
    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        source: SegmentSource,
        executor: Executor,
        fetcher: Fetcher,
    ) -> None:
        self._rlmm = rlmm
        self._source = source
        self._executor = executor
        self._fetcher = fetcher

    def claim_outside(self, tp: TopicIdPartition, start: int, end: int) -> None:
        """A segment whose manifest cannot be read before the first or after the last
        readable one: the log's true start or end is unknown, and saying the readable one
        would hide its records."""
        for claim in self._fetcher.claims(tp):
            if claim.start_offset < start or claim.start_offset >= end:
                raise CorruptManifestError(
                    f"{tp.topic}-{tp.partition}: the segment from offset {claim.start_offset} "
                    f"has a manifest that cannot be read ({claim.key}: {claim.reason}), so "
                    "where the remote log starts and ends is not known"
                )

    def _claim_before(self, tp: TopicIdPartition, offset: int | None) -> None:
        """A timestamp search that passed over a segment whose manifest cannot be read (before
        ``offset``; anywhere when ``None``) cannot know the answer was not in it."""
        for claim in self._fetcher.claims(tp):
            if offset is None or claim.start_offset < offset:
                raise CorruptManifestError(
                    f"{tp.topic}-{tp.partition}: the segment from offset {claim.start_offset} "
                    f"has a manifest that cannot be read ({claim.key}: {claim.reason}); the "
                    "answer may be in it"
                )

    def earliest(self, tp: TopicIdPartition) -> OffsetResult:
        start, end = remote_bounds(self._rlmm, tp)
        self.claim_outside(tp, start, end)
        if end == 0:
            return NOT_FOUND
        check_epochs(self._rlmm, tp)
        return OffsetResult(start, -1, self._rlmm.epoch_for_offset(tp, start))

    def latest(self, tp: TopicIdPartition) -> OffsetResult:
        start, end = remote_bounds(self._rlmm, tp)
        self.claim_outside(tp, start, end)
        check_epochs(self._rlmm, tp)
        lineage = self._rlmm.epoch_lineage(tp)
        return OffsetResult(end, -1, lineage[-1].epoch if lineage else None)

    def latest_tiered(self, tp: TopicIdPartition) -> OffsetResult:
        """-5 LATEST_TIERED: the highest offset in remote storage and its leader epoch; none
        when nothing is."""
        start, end = remote_bounds(self._rlmm, tp)
        self.claim_outside(tp, start, end)
        if end == 0:
            return NOT_FOUND
        check_epochs(self._rlmm, tp)
        return OffsetResult(end - 1, -1, self._rlmm.epoch_for_offset(tp, end - 1))

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

    def _neighbours(
        self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata
    ) -> list[RemoteLogSegmentMetadata]:
        out = [m for m in (_last_segment(self._rlmm, tp),) if m is not None and m != meta]
        if meta.start_offset > 0:
            before = resolve(self._rlmm, tp, meta.start_offset - 1)
            if before is not None and before != meta:
                out.append(before)
        return out

    async def max_timestamp(self, tp: TopicIdPartition, deadline: Deadline) -> OffsetResult:
        self._claim_before(tp, None)
        picked = await asyncio.to_thread(self._max_timestamp_segment, tp)
        if picked is None:
            return NOT_FOUND
        best, start = picked
        # A segment whose metadata understates its max timestamp would be passed over: the
        # last segment (where the largest timestamps usually are) and the one before the
        # chosen one must not hold a larger timestamp than the chosen one promises.
        for other in await asyncio.to_thread(self._neighbours, tp, best):
            await self._check_skipped(other, best.max_timestamp_ms + 1, deadline)
        # The first record carrying the segment's max timestamp is the first record at or
        # after it: the time index finds its neighbourhood (``offsetOfMaxTimestamp``).
        return await self._search(best, best.max_timestamp_ms, start, deadline)

    async def for_timestamp(
        self, tp: TopicIdPartition, timestamp: int, deadline: Deadline
    ) -> OffsetResult:
        rlmm = self._rlmm
        picked = await asyncio.to_thread(timestamp_segment, rlmm, tp, timestamp)
        self._claim_before(tp, None if picked is None else picked[0].start_offset)
        await asyncio.to_thread(check_epochs, rlmm, tp)
        if picked is None:
            last = await asyncio.to_thread(_last_segment, rlmm, tp)
            await self._check_skipped(last, timestamp, deadline)
            return NOT_FOUND
        meta, start = picked
        if meta.start_offset > start:
            before = await asyncio.to_thread(resolve, rlmm, tp, meta.start_offset - 1)
            await self._check_skipped(before, timestamp, deadline)
        return await self._search(meta, timestamp, start, deadline)

    async def _check_skipped(
        self, meta: RemoteLogSegmentMetadata | None, timestamp: int, deadline: Deadline
    ) -> None:
        """A segment passed over because its metadata's max timestamp is below ``timestamp``
        must hold no such timestamp: its time index's last entry (the segment's largest
        timestamp, appended on roll) says so; else the metadata is corrupt."""
        if meta is None or meta.max_timestamp_ms >= timestamp:
            return
        indexes = await self._fetcher.indexes(meta, deadline)
        last = indexes.time_index.last_entry()
        if last.timestamp >= timestamp:
            key = self._source.object_key(meta).with_suffix(Suffix.MANIFEST).key
            raise CorruptManifestError(
                f"{key}: maxTimestampMs is {meta.max_timestamp_ms}, but the segment's time index "
                f"holds timestamp {last.timestamp} at offset {last.offset}"
            )

    async def _search(
        self, meta: RemoteLogSegmentMetadata, timestamp: int, start: int, deadline: Deadline
    ) -> OffsetResult:
        """Read the segment window by window from the index position; stop at the first hit."""
        fetcher = self._fetcher
        indexes = await fetcher.indexes(meta, deadline)
        entry = indexes.lookup_timestamp(timestamp)
        framer = fetcher.framer(meta, indexes, max(start, entry.offset))
        search = TimestampSearch(
            framer.bounds.key, timestamp, start, entry, from_segment_start=framer.start == 0
        )
        loop = asyncio.get_running_loop()
        async for batches in fetcher.batches(meta, framer, _WINDOW, deadline):
            hit = await loop.run_in_executor(self._executor, _first_hit, search, batches)
            if hit is not None:
                return OffsetResult(hit.offset, hit.timestamp, hit.leader_epoch)
        search.finish(meta.max_timestamp_ms, meta.start_offset)
        return NOT_FOUND


def _first_hit(search: TimestampSearch, batches: list[RecordBatch]) -> TimestampHit | None:
    for batch in batches:
        hit = search.add(batch)
        if hit is not None:
            return hit
    return None
