"""Builders for metadata events shared by the metadata tests."""

from __future__ import annotations

import uuid

from gateway.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
)

TOPIC_ID = uuid.UUID(int=1)
TP = TopicIdPartition(TOPIC_ID, 0, "orders")


def seg_id(n: int, tp: TopicIdPartition = TP) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(tp, uuid.UUID(int=1000 + n))


def segment(
    n: int,
    start: int,
    end: int,
    epochs: dict[int, int] | None = None,
    *,
    size: int = 100,
    tp: TopicIdPartition = TP,
    txn_empty: bool = False,
    event_time: int = 1_000,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        seg_id(n, tp),
        start,
        end,
        max_timestamp_ms=start * 10,
        broker_id=1,
        event_timestamp_ms=event_time,
        segment_leader_epochs=tuple((epochs or {0: start}).items()),
        segment_size_in_bytes=size,
        txn_index_empty=txn_empty,
    )


def update(
    n: int, state: SegmentState, tp: TopicIdPartition = TP, *, broker: int = 2
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(seg_id(n, tp), 2_000, None, state, broker)


def partition_delete(
    state: PartitionDeleteState, tp: TopicIdPartition = TP
) -> RemotePartitionDeleteMetadata:
    return RemotePartitionDeleteMetadata(tp, state, 3_000, 1)
