"""A partition's segments as a listing says them: each with whether it is displaced.

Kafka's cache keeps a finished segment whose offsets a later upload took over (a re-upload by
a later leader, a superset upload) among the unreferenced ids: it is still listed
(``listRemoteLogSegments``) and still counted in the sizes, but no read reaches it. A listing
that only printed its state would show two finished segments for the same offsets; this one
says which is displaced and by which segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicIdPartition,
)


@dataclass(frozen=True, slots=True)
class ListedSegment:
    """One segment of a listing. ``displaced_by``: for a COPY_SEGMENT_FINISHED segment that
    no read reaches any more (none of its epochs maps an offset to it), the segment that
    holds its first offset now (``None`` when it is not displaced)."""

    meta: RemoteLogSegmentMetadata
    displaced: bool = False
    displaced_by: RemoteLogSegmentId | None = None


def displacer(
    rlmm: RemoteLogMetadataManager, meta: RemoteLogSegmentMetadata
) -> tuple[bool, RemoteLogSegmentId | None]:
    """Whether finished ``meta`` is displaced, and by which segment (one lookup per epoch)."""
    if meta.state is not SegmentState.COPY_SEGMENT_FINISHED:
        return False, None
    holders = []
    for epoch, start, _ in meta.epoch_ranges():
        holder = rlmm.remote_log_segment_metadata(meta.partition, epoch, start)
        if holder is not None and holder.segment_id == meta.segment_id:
            return False, None
        holders.append(holder)
    by = next((h.segment_id for h in holders if h is not None), None)
    return True, by


def list_segments(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> list[ListedSegment]:
    """Every segment of ``tp`` not DELETE_SEGMENT_FINISHED, by start offset, each with whether
    it is displaced (blocking: a few lookups per segment)."""
    out = []
    for meta in rlmm.list_remote_log_segments(tp):
        displaced, by = displacer(rlmm, meta)
        out.append(ListedSegment(meta, displaced, by))
    return out
