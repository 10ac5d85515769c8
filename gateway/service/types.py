"""Values the service layer returns to the HTTP layer (framework-free, frozen)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from gateway.kafka.records import RecordLike
from gateway.metadata.follow import FollowStatus
from gateway.read.txn import AbortedTransaction as AbortedTransaction  # noqa: PLC0414 (its home is the read core; re-exported)


class IsolationLevel(StrEnum):
    """Kafka's isolation levels; parsed in any case (``READ_COMMITTED`` as Kafka spells it)."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"

    @classmethod
    def _missing_(cls, value: object) -> IsolationLevel | None:
        if isinstance(value, str):
            lowered = value.lower()
            for level in cls:
                if level.value == lowered:
                    return level
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    topic_id: uuid.UUID
    partition: int
    remote_log_start_offset: int  # the lowest offset in the remote tier (0 when empty)
    remote_log_end_offset: int  # one past the highest offset in the remote tier (a log end)
    size: int  # KIP-852 remote_log_size
    segment_count: int
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment_id: str  # Kafka base64url
    start_offset: int
    end_offset: int
    state: str
    size: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]
    txn_index_empty: bool
    # A finished upload no leader epoch maps any more (a later upload of its offsets took its
    # place): reads never reach it. ``displaced_by``: the segment reads reach at its start.
    displaced: bool = False
    displaced_by: str | None = None


@dataclass(frozen=True, slots=True)
class FetchedRecord:
    """One data record with its batch context (control records never get here)."""

    record: RecordLike
    offset: int
    timestamp: int
    log_append_time: bool
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class FetchedBatches:
    """Whole record batches from one segment, as stored (for the raw response)."""

    segment_start_offset: int
    data: bytes | memoryview  # views of the bytes read (no copy)
    first_offset: int  # base offset of the first batch
    last_offset: int  # last offset of the last batch


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What a fetch returns; ``next_offset`` is one past the last offset considered."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    batches: tuple[FetchedBatches, ...]
    next_offset: int
    log_start_offset: int
    log_end_offset: int  # one past the highest remote offset
    aborted_transactions: tuple[AbortedTransaction, ...] | None  # None: read_uncommitted
    # read_committed: the remote last stable offset (the batches end before it); else None
    last_stable_offset: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetResult:
    """ListOffsets: ``offset`` -1 and ``timestamp`` -1 when nothing matches."""

    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class UnreadableManifest:
    """A listed ``.rsm-manifest`` the catalog could not read: it still claims the offsets from
    ``start_offset`` on in its partition (reads there fail naming ``key``)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class Readiness:
    """``ready`` once the first bucket scan has finished; until then ``reason`` says why not
    (e.g. the store cannot be listed). ``unreadable``: the manifests of a ready catalog that it
    could not read (the partitions they belong to are degraded)."""

    ready: bool
    reason: str | None = None
    unreadable: tuple[UnreadableManifest, ...] = ()
    follow: FollowStatus | None = None
    """The followed metadata topic's status, when the catalog follows one."""
