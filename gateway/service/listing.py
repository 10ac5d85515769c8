"""A partition's segments for ``/segments``: each with its state and whether a later upload of
its offsets displaced it (:mod:`gateway.metadata.listing`), so a re-upload is never shown as a
second finished segment without saying which one reads reach."""

from __future__ import annotations

from gateway.kafka.uuids import encode_uuid
from gateway.metadata.listing import list_segments
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.types import SegmentInfo


def segment_infos(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> list[SegmentInfo]:
    """Every segment of ``tp`` not DELETE_SEGMENT_FINISHED, by start offset (RLMM reads:
    call it off the event loop)."""
    return [
        SegmentInfo(
            encode_uuid(m.segment_id.id),
            m.start_offset,
            m.end_offset,
            m.state.name,
            m.segment_size_in_bytes,
            m.max_timestamp_ms,
            m.event_timestamp_ms,
            m.segment_leader_epochs,
            m.txn_index_empty,
            listed.displaced,
            None if listed.displaced_by is None else encode_uuid(listed.displaced_by.id),
        )
        for listed in list_segments(rlmm, tp)
        for m in (listed.meta,)
    ]
