"""``findOffsetByTimestamp`` on the remote tier, for a read's timestamp bounds (driver side).

The segment comes from the metadata (the service's
:func:`~gateway.service.offsets.timestamp_segment`), then its time index, its offset index and
a record scan, the search the service runs: indexes checked against the metadata, the segment
framed strictly from the offset-index floor, the time index entry checked against the batches
it points at (:class:`~gateway.read.timesearch.TimestampSearch`). A segment passed over for its
``maxTimestampMs`` must not hold the timestamp by its time index; a search that passes over a
manifest the scan could not read cannot know the answer was not in it
(:func:`~gateway.spark.dataloss.lost`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import CorruptManifestError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.read.framing import SegmentFramer
from gateway.read.timesearch import TimestampSearch
from gateway.remote.keys import Suffix
from gateway.service.locate import Claim, remote_bounds, resolve
from gateway.service.offsets import check_epochs, timestamp_segment
from gateway.spark.dataloss import lost
from gateway.spark.plan import object_key, segment_ref
from gateway.spark.segments import (
    ReadContext,
    frame,
    offset_index,
    open_segment,
    sync_reader,
    time_index,
)


def _check_skipped(ctx: ReadContext, meta: RemoteLogSegmentMetadata | None, timestamp: int) -> None:
    """A segment passed over because its metadata's max timestamp is below ``timestamp`` must
    hold no such timestamp: its time index's last entry (its largest timestamp) says so; else
    the metadata is corrupt (as the service's ``OffsetFinder``)."""
    if meta is None or meta.max_timestamp_ms >= timestamp:
        return
    ref = segment_ref(meta, ctx.key_prefix, 0)
    last = time_index(sync_reader(ctx), open_segment(ctx, ref), ref).last_entry()
    if last.timestamp >= timestamp:
        raise CorruptManifestError(
            f"{object_key(meta, ctx.key_prefix, Suffix.MANIFEST)}: maxTimestampMs is "
            f"{meta.max_timestamp_ms}, but the segment's time index holds timestamp "
            f"{last.timestamp} at offset {last.offset}"
        )


def offset_for_timestamp(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    timestamp: int,
    ctx: ReadContext,
    *,
    claims: Sequence[Claim] = (),
    fail_on_data_loss: bool = True,
) -> int | None:
    """``findOffsetByTimestamp`` on the remote tier (None: no record at or after it). A search
    that passes over a segment whose manifest cannot be read (``claims``) cannot know the
    answer was not in it: an error, or a warning without ``fail_on_data_loss``."""
    picked = timestamp_segment(rlmm, tp, timestamp)
    where = f"partition {tp.partition} of {tp.topic}: timestamp {timestamp}"
    passed = [c for c in claims if picked is None or c.start_offset < picked[0].start_offset]
    if passed:
        lost(fail_on_data_loss, f"{where}: the answer may be in an unreadable segment", passed)
    check_epochs(rlmm, tp)  # the search followed the epoch lineage: refused while in doubt
    if picked is None:
        _, end = remote_bounds(rlmm, tp)
        _check_skipped(ctx, resolve(rlmm, tp, end - 1) if end > 0 else None, timestamp)
        return None
    meta, start = picked
    if meta.start_offset > start:
        _check_skipped(ctx, resolve(rlmm, tp, meta.start_offset - 1), timestamp)
    ref = segment_ref(meta, ctx.key_prefix, 0)
    reader = sync_reader(ctx)
    segment = open_segment(ctx, ref)
    entry = time_index(reader, segment, ref).lookup(timestamp)
    floor = offset_index(reader, segment, ref).lookup(max(start, entry.offset, ref.start_offset))
    framer = SegmentFramer(ref.bounds, floor.position, floor.offset)
    search = TimestampSearch(ref.key, timestamp, start, entry, from_segment_start=framer.start == 0)
    for batch in frame(reader, segment, framer, ref.size):
        hit = search.add(batch)
        if hit is not None:
            return hit.offset
    search.finish(meta.max_timestamp_ms, meta.start_offset)
    return None
