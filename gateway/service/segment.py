"""One remote segment read (``RemoteLogManager.read`` within a segment): its indexes checked
against its metadata, its bytes window by window, framed and checked (:mod:`gateway.read`),
and whole batches from an offset within a budget, warm from verified runs or cold from the
store. :class:`~gateway.service.fetch.Fetcher` builds a FETCH across segments on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import CorruptDataError, CorruptManifestError, GatewayError, add_context
from gateway.kafka.batch import RecordBatch
from gateway.metadata.model import RemoteLogSegmentMetadata
from gateway.read.framing import SegmentFramer
from gateway.remote.keys import Suffix
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


class SegmentReader:
    """Reads of one segment at a time from a segment source (its objects, the chunk cache and
    the verified runs); index checks on first load and all object I/O run off the event loop."""

    def __init__(self, source: SegmentSource) -> None:
        self.source = source

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
