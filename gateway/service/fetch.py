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
from collections.abc import AsyncIterator, Callable

from cachetools import LRUCache

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import (
    CorruptDataError,
    CorruptManifestError,
    GatewayError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    add_context,
)
from gateway.kafka.batch import RecordBatch
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.read.framing import SegmentFramer
from gateway.remote.keys import Suffix
from gateway.service.locate import Claims, held, locate, read_inline, remote_bounds, resolve
from gateway.service.runs import (
    ColdRead,
    Run,
    SegmentRead,
    Window,
    frame_window,
    segment_bounds,
)
from gateway.service.types import FetchedBatches
from indexcache import SegmentIndexes

MIN_WINDOW = 64 * 1024
MAX_WINDOW = 8 * 1024 * 1024


class SegmentVanishedError(ObjectNotFoundError):
    """An object of a listed segment is missing (retention may have deleted the segment under
    the read); names the segment so the caller can check and re-resolve."""

    def __init__(self, message: str, meta: RemoteLogSegmentMetadata) -> None:
        super().__init__(message)
        self.meta = meta


class Fetcher:
    """FETCH over the RLMM and a segment source.

    What runs on the event loop (issue 15, :mod:`gateway.service.locate`): a fetch's RLMM reads
    are point lookups (:func:`held`), run inline unless a writer holds the RLMM; reads that list
    a partition's segments (:meth:`_locate` past a hole, an unreadable manifest or the log's
    end) run in a thread, as do index checks on first load and all object I/O.
    """

    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        source: SegmentSource,
        claims: Claims | None = None,
    ) -> None:
        self.rlmm = rlmm
        self.source = source
        self.claims: Claims = claims if claims is not None else (lambda tp: ())
        self._tails: LRUCache[TopicIdPartition, int] = LRUCache(maxsize=100_000)
        # Per partition, where the last fetch ended: a fetch from there is a reader paging on.
        self._resume: LRUCache[TopicIdPartition, int] = LRUCache(maxsize=100_000)

    async def check_tail(self, tp: TopicIdPartition, end: int, deadline: Deadline) -> None:
        """The log end an answer reports is the last segment's ``endOffset + 1``: before it is
        first reported, the last segment's bytes from its last offset-index entry to its end
        are framed, so the end is one the data keeps (remembered per partition and end)."""
        if end == 0 or self._tails.get(tp) == end:
            return
        meta = await read_inline(self.rlmm, held, self.rlmm, tp, end - 1)
        if meta is None:
            meta = await asyncio.to_thread(resolve, self.rlmm, tp, end - 1)
        if meta is None or meta.end_offset != end - 1:
            return  # the answer's own reads meet whatever this is
        framer = self.framer(meta, await self.indexes(meta, deadline), meta.end_offset)
        async for _ in self.windows(meta, framer, MIN_WINDOW, deadline):
            pass  # the end checks run when the last byte is fed
        self._tails[tp] = end

    # --- where the offsets are -----------------------------------------------------------

    async def segment_for(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
        """:meth:`_locate`: inline when :func:`held` finds the segment, else in a thread."""
        found = await read_inline(self.rlmm, held, self.rlmm, tp, offset)
        if found is not None:
            return found
        return await asyncio.to_thread(self._locate, tp, offset)

    def _locate(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
        """:func:`gateway.service.locate.locate` with this fetcher's claims (may list the
        partition: call it off the event loop)."""
        return locate(self.rlmm, self.claims, tp, offset)

    def next_segment(
        self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata
    ) -> RemoteLogSegmentMetadata | None:
        """The segment after ``meta``: it must hold ``endOffset + 1``; ``None`` at the end of
        the remote log (may list the partition: call it off the event loop)."""
        try:
            return self._locate(tp, meta.end_offset + 1)
        except OffsetOutOfRangeError:
            return None

    async def following(
        self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata
    ) -> RemoteLogSegmentMetadata | None:
        """:meth:`next_segment`: inline when :func:`held` finds it, else in a thread."""
        found = await read_inline(self.rlmm, held, self.rlmm, tp, meta.end_offset + 1)
        return found or await asyncio.to_thread(self.next_segment, tp, meta)

    async def fetch(
        self, tp: TopicIdPartition, offset: int, max_bytes: int, deadline: Deadline
    ) -> tuple[list[SegmentRead], int]:
        """Batches from ``offset`` and the next offset to fetch (one past the last offset
        considered).

        At exactly the remote log end: no batches and ``offset`` itself, as Kafka answers a
        fetch at the high watermark; past it, :class:`OffsetOutOfRangeError`."""
        meta: RemoteLogSegmentMetadata | None
        try:
            meta = await self.segment_for(tp, offset)
        except OffsetOutOfRangeError as exc:
            if offset != exc.log_end_offset:
                raise
            _, end = await read_inline(self.rlmm, remote_bounds, self.rlmm, tp)
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
                budget -= read.end_position - read.position
                target = next_offset = read.last_offset + 1
            if full:
                break  # the budget ended inside this segment
            # The rest of the segment was read to its end (an empty one is hopped over, 3.8+).
            next_offset = max(next_offset, meta.end_offset + 1)
            target = max(target, meta.end_offset + 1)
            if budget <= 0:
                break
            try:
                meta = await self.following(tp, meta)
            except GatewayError:
                if reads:
                    break
                raise
        self._read_ahead(tp, offset, reads, next_offset)
        return reads, next_offset

    def _read_ahead(
        self, tp: TopicIdPartition, offset: int, reads: list[SegmentRead], next_offset: int
    ) -> None:
        """Read-ahead across a segment border (the chunk cache's stops at one): a reader paging
        on (this fetch began where the partition's last one ended) whose read ended within
        read-ahead of its segment's end has the next segment's head loaded in the background.
        A random read near an end loads nothing extra."""
        paging = self._resume.get(tp) == offset
        self._resume[tp] = next_offset
        size = self.source.chunks.readahead_bytes
        if not (paging and reads and size):
            return
        last = reads[-1]
        meta = last.meta
        if last.end_position + size < meta.segment_size_in_bytes:
            return
        self.source.prefetch(lambda: self.following(tp, meta), size)

    # --- one segment ---------------------------------------------------------------------

    def object_key(self, meta: RemoteLogSegmentMetadata) -> str:
        """The segment's ``.log`` object key."""
        return self.source.object_key(meta).key

    async def indexes(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> SegmentIndexes:
        """The segment's indexes, checked against its metadata before they are trusted."""
        indexes = await self.source.indexes(meta, deadline)
        end, size = meta.end_offset, meta.segment_size_in_bytes
        if not indexes.checked_against(end, size):
            what = self.source.object_key(meta).with_suffix(Suffix.INDEXES).key
            try:
                await asyncio.to_thread(indexes.check_against, end, size)
            except CorruptDataError as exc:
                add_context(exc, what)
                raise
        return indexes

    async def windows(
        self,
        meta: RemoteLogSegmentMetadata,
        framer: SegmentFramer,
        window: int | Callable[[], int],
        deadline: Deadline,
        *,
        grow: bool = False,
    ) -> AsyncIterator[list[Run]]:
        """The segment's batches window by window from ``framer``'s cursor (a new framer), to
        its end (checked there), as runs framed in place (:func:`frame_window`); ``window`` is a
        size, or says the next size before each read; windows double up to ``MAX_WINDOW``
        when ``grow``. Every iteration consumes bytes or fails: no
        loop without progress."""
        boundary = framer.cursor
        while not framer.at_end:
            if callable(window):
                size = window()
            else:
                size = window = min(window * 2, MAX_WINDOW) if grow else window
            framed = await self.window(meta, framer, boundary, size, deadline)
            boundary = framed.boundary
            yield framed.runs

    async def window(
        self,
        meta: RemoteLogSegmentMetadata,
        framer: SegmentFramer,
        boundary: int,
        size: int,
        deadline: Deadline,
        *,
        verify: bool = False,
    ) -> Window:
        """The next window of at least ``size`` bytes (and the rest of the pending batch) fed
        to ``framer`` (:func:`frame_window`; ``boundary`` as there); the end checks run when
        the segment's last byte is fed. ``verify``: every batch completed has its CRC
        checked too."""
        key = framer.bounds.key
        cursor = framer.cursor
        want = max(size, framer.need)
        try:
            # Verified bytes are kept as runs: the units they came from need not stay.
            data, total = await self.source.read(
                meta, cursor, cursor + want, deadline, keep=not verify
            )
            if total != framer.bounds.size:
                raise CorruptManifestError(
                    f"{key}: the manifest says {total} bytes, the segment metadata "
                    f"{framer.bounds.size}"
                )
            if not data:
                raise CorruptDataError(f"{key}: no bytes at {cursor} of {total}")
            # One buffer per read, framed in place as one run: units framed apart cost a
            # run, a part and a send each, measured slower than the join's one copy.
            framed = frame_window(framer, data, boundary)
            if framer.at_end:
                framer.finish()
            if verify:
                for run in framed.runs:
                    for batch in run.batches:
                        batch.ensure_valid()
        except CorruptDataError as exc:
            # The cache may hold the bad bytes (an untransformed chunk is only checked
            # here): drop them, so a retry reads the object again.
            await self.source.chunks.invalidate(meta.segment_id.id)
            if str(exc).startswith(key):
                raise
            add_context(exc, f"{key} (read from byte {cursor})")
            raise
        return framed

    async def batches(
        self,
        meta: RemoteLogSegmentMetadata,
        framer: SegmentFramer,
        window: int,
        deadline: Deadline,
        *,
        grow: bool = False,
    ) -> AsyncIterator[list[RecordBatch]]:
        """:meth:`windows` as the list of each window's batches."""
        async for runs in self.windows(meta, framer, window, deadline, grow=grow):
            yield [batch for run in runs for batch in run.batches]

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
        ``budget`` (one batch at least when ``min_one``), and whether the budget ended here.

        Warm, the answer is slices of verified runs (:mod:`gateway.cache.verified`) found by
        offset: no batch is framed or checked again, and no index is read. Cold, windows are
        read from the offset-index floor of ``target`` (or right after a held run that ends
        just before it), framed, every batch CRC-checked, and kept as runs."""
        sid = meta.segment_id.id
        held = self.source.runs
        offset = max(target, meta.start_offset)
        parts: list[FetchedBatches] = []
        positions: list[int] = []
        total = 0
        cold: ColdRead | None = None

        def done(full: bool) -> tuple[SegmentRead | None, bool]:
            read = SegmentRead(meta, tuple(parts), tuple(positions)) if parts else None
            return read, full

        while offset <= meta.end_offset:
            run = cold.take(offset) if cold is not None else None
            if run is None:
                run = await held.lookup(sid, offset)
                if run is not None:
                    cold = None  # a cold read resumes after the held run, not where it was
            if run is None:
                try:
                    if cold is None:
                        after = (positions[-1] + len(parts[-1].data), offset) if parts else None
                        cold = await self._cold_read(meta, offset, after, deadline)
                    size = min(max(budget - total, 0) + MIN_WINDOW, MAX_WINDOW)
                    run = await cold.load(offset, size)
                except GatewayError:
                    # The deadline (or a store fault) after some batches were read: those are
                    # the answer, as Kafka answers at max_wait with what it has; the next fetch
                    # meets the failure first.
                    if parts:
                        return done(True)
                    raise
                if run is None:
                    continue  # the window completed no batch ending at or after the offset
            i = run.index_of(offset)
            if parts:
                run.check_follows(offset, i, self.object_key(meta))
            j = run.fit(i, budget - total)
            if j == i:
                if parts or not min_one:
                    return done(True)
                j = i + 1  # at least one whole batch, however large
            lo, hi = run.start(i), run.ends[j - 1]
            last = run.lasts[j - 1]
            parts.append(FetchedBatches(meta.start_offset, run.data[lo:hi], run.bases[i], last))
            positions.append(run.position + lo)
            total += hi - lo
            offset = last + 1
            if j < len(run) or total >= budget:
                return done(offset <= meta.end_offset)
        return done(False)

    async def _cold_read(
        self,
        meta: RemoteLogSegmentMetadata,
        offset: int,
        after: tuple[int, int] | None,
        deadline: Deadline,
    ) -> ColdRead:
        """Where a cold read of ``offset`` starts: right after the batches read so far
        (``after``: their end position and ``offset``), else after a held run that ends at
        ``offset - 1``, else at the offset-index floor of ``offset``."""
        if after is None and offset > meta.start_offset:
            before = await self.source.runs.lookup(meta.segment_id.id, offset - 1)
            if before is not None and before.last_offset == offset - 1:
                after = (before.end_position, offset)
        if after is not None:
            bounds = segment_bounds(meta, self.object_key(meta))
            framer = SegmentFramer(bounds, after[0], after=after[1] - 1)
        else:
            framer = self.framer(meta, await self.indexes(meta, deadline), offset)

        async def read(framer: SegmentFramer, boundary: int, size: int) -> Window:
            return await self.window(meta, framer, boundary, size, deadline, verify=True)

        return ColdRead(meta, framer, self.source.runs, read)
