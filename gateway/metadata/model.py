"""The KIP-405 metadata model: segment ids, segment metadata, updates, partition deletes.

Mirrors ``org.apache.kafka.server.log.remote.storage.{RemoteLogSegmentId,
RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState,
RemotePartitionDeleteMetadata, RemotePartitionDeleteState}`` and
``org.apache.kafka.common.TopicIdPartition`` (``remote-read-semantics.md`` §1 to §3).

* ``segment_leader_epochs``: (epoch, start offset) pairs in ascending epoch order, non-empty;
  the start of an epoch inside the segment, the first clamped to ``start_offset``.
* ``end_offset`` is inclusive and set by the copier to ``nextSegmentBaseOffset - 1``, so it can
  lie past the last record.
* An update replaces broker id, event time, custom metadata and state; nothing else
  (``createWithUpdates``).

Valid segment-state transitions: ``None -> STARTED``, any state to itself, ``STARTED ->
FINISHED``, ``STARTED -> DELETE_STARTED``, ``FINISHED -> DELETE_STARTED``, ``DELETE_STARTED ->
DELETE_FINISHED``. Partition-delete transitions: ``None -> MARKED``, self, ``MARKED -> STARTED``,
``STARTED -> FINISHED``.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Protocol

from gateway.errors import InvalidStateTransitionError
from gateway.kafka.ints import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, check_int
from gateway.kafka.uuids import encode_uuid


class SegmentState(IntEnum):
    """``RemoteLogSegmentState`` with its wire ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(IntEnum):
    """``RemotePartitionDeleteState`` with its wire ids."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_SEGMENT_TRANSITIONS: frozenset[tuple[SegmentState | None, SegmentState]] = frozenset(
    {
        (None, SegmentState.COPY_SEGMENT_STARTED),
        *((s, s) for s in SegmentState),
        (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED),
        (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED),
        (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED),
        (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED),
    }
)
_PARTITION_TRANSITIONS: frozenset[tuple[PartitionDeleteState | None, PartitionDeleteState]] = (
    frozenset(
        {
            (None, PartitionDeleteState.DELETE_PARTITION_MARKED),
            *((s, s) for s in PartitionDeleteState),
            (
                PartitionDeleteState.DELETE_PARTITION_MARKED,
                PartitionDeleteState.DELETE_PARTITION_STARTED,
            ),
            (
                PartitionDeleteState.DELETE_PARTITION_STARTED,
                PartitionDeleteState.DELETE_PARTITION_FINISHED,
            ),
        }
    )
)


def is_valid_segment_transition(current: SegmentState | None, target: SegmentState) -> bool:
    """``RemoteLogSegmentState.isValidTransition``."""
    return (current, target) in _SEGMENT_TRANSITIONS


def is_valid_partition_transition(
    current: PartitionDeleteState | None, target: PartitionDeleteState
) -> bool:
    """``RemotePartitionDeleteState.isValidTransition``."""
    return (current, target) in _PARTITION_TRANSITIONS


def check_segment_transition(
    segment: RemoteLogSegmentId, current: SegmentState | None, target: SegmentState
) -> None:
    if not is_valid_segment_transition(current, target):
        name = current.name if current is not None else "none"
        raise InvalidStateTransitionError(
            f"segment {segment}: invalid state transition {name} -> {target.name}"
        )


def check_partition_transition(
    partition: TopicIdPartition,
    current: PartitionDeleteState | None,
    target: PartitionDeleteState,
) -> None:
    if not is_valid_partition_transition(current, target):
        name = current.name if current is not None else "none"
        raise InvalidStateTransitionError(
            f"partition {partition}: invalid delete-state transition {name} -> {target.name}"
        )


class _SegmentFields(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def max_timestamp_ms(self) -> int: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def event_timestamp_ms(self) -> int: ...
    @property
    def segment_size_in_bytes(self) -> int: ...
    @property
    def segment_leader_epochs(self) -> tuple[tuple[int, int], ...]: ...


def _named(segment: object | None) -> str:
    return "" if segment is None else f"segment {segment}: "


def check_segment_fields(
    meta: _SegmentFields, segment: object | None
) -> tuple[tuple[int, int], ...]:
    """The range checks every segment record shares (the metadata and the snapshot record);
    returns the leader epochs sorted by epoch. ``segment`` names the segment in an error
    (formatted only then: the checks run for every record a follower applies)."""
    check_int("start offset", meta.start_offset, 0, INT64_MAX)
    check_int("end offset", meta.end_offset, meta.start_offset, INT64_MAX)
    check_int("max timestamp", meta.max_timestamp_ms, INT64_MIN, INT64_MAX)
    check_int("broker id", meta.broker_id, INT32_MIN, INT32_MAX)
    check_int("event timestamp", meta.event_timestamp_ms, INT64_MIN, INT64_MAX)
    check_int("segment size", meta.segment_size_in_bytes, 0, INT32_MAX)
    epochs = tuple(sorted((int(e), int(o)) for e, o in meta.segment_leader_epochs))
    if not epochs:
        raise ValueError(f"{_named(segment)}segment_leader_epochs is empty")
    for epoch, offset in epochs:
        check_int("leader epoch", epoch, 0, INT32_MAX)
        check_int("leader epoch start offset", offset, 0, INT64_MAX)
    if len({e for e, _ in epochs}) != len(epochs):
        raise ValueError(f"{_named(segment)}segment_leader_epochs repeats an epoch")
    return epochs


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """A partition known by topic id (what the RLMM keys on) and by topic name."""

    topic_id: uuid.UUID
    partition: int
    topic: str = field(compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id, uuid.UUID):
            raise ValueError("topic_id must be a uuid.UUID")
        check_int("partition", self.partition, 0, INT32_MAX)

    def __str__(self) -> str:
        return f"{encode_uuid(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """One upload attempt of one segment: the partition plus a random segment uuid."""

    partition: TopicIdPartition
    id: uuid.UUID

    def __post_init__(self) -> None:
        if not isinstance(self.id, uuid.UUID):
            raise ValueError("segment id must be a uuid.UUID")

    def __str__(self) -> str:
        return f"{self.partition}/{encode_uuid(self.id)}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """``RemoteLogSegmentMetadata``: every field of spec §2."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None = None
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        epochs = check_segment_fields(self, self.segment_id)
        object.__setattr__(self, "state", SegmentState(self.state))
        object.__setattr__(self, "segment_leader_epochs", epochs)

    @property
    def partition(self) -> TopicIdPartition:
        return self.segment_id.partition

    def epoch_start(self, epoch: int) -> int | None:
        """The start offset of ``epoch`` inside this segment, if the segment has it."""
        for e, offset in self.segment_leader_epochs:
            if e == epoch:
                return offset
        return None

    def epoch_end(self, epoch: int) -> int:
        """``RemoteLogMetadataCache.highestOffsetForEpoch(epoch, segment)``: the start of the
        next higher epoch in this segment minus one, else the segment's end offset."""
        epochs = self.segment_leader_epochs
        slot = bisect_right(epochs, (epoch, INT64_MAX))
        return epochs[slot][1] - 1 if slot < len(epochs) else self.end_offset

    def epoch_ranges(self) -> list[tuple[int, int, int]]:
        """(epoch, start in segment, end in segment) for every epoch of the segment."""
        return [(e, s, self.epoch_end(e)) for e, s in self.segment_leader_epochs]

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """``createWithUpdates``: broker id, event time, custom metadata and state."""
        return replace(
            self,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata,
            state=update.state,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """``RemoteLogSegmentMetadataUpdate``: a state change of a known segment."""

    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: SegmentState
    broker_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", SegmentState(self.state))
        check_int("broker id", self.broker_id, INT32_MIN, INT32_MAX)
        check_int("event timestamp", self.event_timestamp_ms, INT64_MIN, INT64_MAX)


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """``RemotePartitionDeleteMetadata``: a partition-delete state change."""

    partition: TopicIdPartition
    state: PartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", PartitionDeleteState(self.state))
        check_int("broker id", self.broker_id, INT32_MIN, INT32_MAX)
        check_int("event timestamp", self.event_timestamp_ms, INT64_MIN, INT64_MAX)


MetadataEvent = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)
"""What the sources (tiering writer, bucket scan, ``__remote_log_metadata``) feed the manager."""
