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

from cachetools import LRUCache

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import GatewayError, ObjectNotFoundError, OffsetOutOfRangeError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.service.locate import Claims, held, locate, read_inline, remote_bounds, resolve
from gateway.service.runs import SegmentRead
from gateway.service.segment import MAX_WINDOW, MIN_WINDOW, SegmentReader


class SegmentVanishedError(ObjectNotFoundError):
    """An object of a listed segment is missing (retention may have deleted the segment under
    the read); names the segment so the caller can check and re-resolve."""

    def __init__(self, message: str, meta: RemoteLogSegmentMetadata) -> None:
        super().__init__(message)
        self.meta = meta


class Fetcher(SegmentReader):
    """FETCH over the RLMM and a segment source, one segment after another
    (:class:`~gateway.service.segment.SegmentReader` reads each).

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
        super().__init__(source)
        self.rlmm = rlmm
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


__all__ = ["MAX_WINDOW", "MIN_WINDOW", "Fetcher", "SegmentVanishedError"]
