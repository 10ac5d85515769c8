"""The key factory and value layouts of the metadata manager's key space.

Every key starts with a one-byte tag, then the partition (topic id 16 bytes, partition uint32
big-endian), then the tag's fields. Numbers are big-endian with the sign bit flipped, so byte
order is numeric order and a floor lookup is one ordered seek::

    s | tp | segment uuid                  -> segment metadata          (id -> metadata)
    o | tp | epoch | epoch start offset    -> segment uuid              (offsetToId, finished)
    u | tp | epoch | segment uuid          -> ""                        (unreferencedSegmentIds)
    e | tp | epoch                         -> epoch state               (highestLogOffset, size)
    l | tp | start offset | segment uuid   -> ""                        (listing by start offset)
    p | tp                                 -> partition state           (delete state, totals, name)
    c | tp                                 -> leader-epoch lineage      (from a checkpoint)
    d | tp                                 -> lineage dispute           (a checkpoint refused)
    g | tp                                 -> log start offset          (two checkpoints agree)
    t | topic name | 0x00 | topic uuid     -> first event time          (name -> ids)
    f | metadata topic | 0x00 | partition  -> next offset to read      (a follower's position)

Values (big-endian):

* segment: ``q start, q end, q maxTimestamp, i brokerId, q eventTimestamp, i size, b state,
  ? txnIdxEmpty, H epoch count`` then ``(i epoch, q offset)`` per epoch, then ``i`` custom
  metadata length (-1 = null) and its bytes.
* epoch state: ``? has highest, q highestLogOffset, q size`` (KIP-852 running total).
* partition state: ``b delete state (-1 = none), q segment count, q size`` then the topic name.
* lineage: ``16s segment uuid`` of the checkpoint's segment, then ``(i epoch, q offset)``.
* lineage dispute: ``16s segment uuid`` of the refused checkpoint's segment, ``i`` entry count,
  its ``(i epoch, q offset)`` entries, then the object it came from (UTF-8).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Final

from gateway.errors import CorruptCheckpointError
from gateway.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicIdPartition,
)

SEGMENT: Final = b"s"
OFFSET: Final = b"o"
UNREFERENCED: Final = b"u"
EPOCH: Final = b"e"
LISTING: Final = b"l"
PARTITION: Final = b"p"
LINEAGE: Final = b"c"
DISPUTE: Final = b"d"
LOG_START: Final = b"g"
TOPIC: Final = b"t"
PARTITION_TAGS: Final = (
    SEGMENT, OFFSET, UNREFERENCED, EPOCH, LISTING, PARTITION, LINEAGE, DISPUTE, LOG_START,
)  # fmt: skip

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">I")
_I64 = struct.Struct(">Q")
_SEGMENT = struct.Struct(">qqqiqib?H")
_EPOCH_ENTRY = struct.Struct(">iq")
_LEN = struct.Struct(">i")
_EPOCH_STATE = struct.Struct(">?qq")
_PARTITION = struct.Struct(">bqq")
_Q = struct.Struct(">q")
_SIGN32, _SIGN64 = 1 << 31, 1 << 63


def i32(value: int) -> bytes:
    return _I32.pack(value + _SIGN32)


def i64(value: int) -> bytes:
    return _I64.pack(value + _SIGN64)


def read_i64(data: bytes, pos: int) -> int:
    return int(_I64.unpack_from(data, pos)[0]) - _SIGN64


def read_i32(data: bytes, pos: int) -> int:
    return int(_I32.unpack_from(data, pos)[0]) - _SIGN32


def tp_bytes(tp: TopicIdPartition) -> bytes:
    return tp.topic_id.bytes + _U32.pack(tp.partition)


def tp_from(data: bytes, pos: int) -> tuple[uuid.UUID, int]:
    return uuid.UUID(bytes=data[pos : pos + 16]), int(_U32.unpack_from(data, pos + 16)[0])


TP_LEN: Final = 20


def segment_key(tp: TopicIdPartition, segment: uuid.UUID) -> bytes:
    return SEGMENT + tp_bytes(tp) + segment.bytes


def offset_prefix(tp: TopicIdPartition, epoch: int) -> bytes:
    return OFFSET + tp_bytes(tp) + i32(epoch)


def offset_key(tp: TopicIdPartition, epoch: int, offset: int) -> bytes:
    return offset_prefix(tp, epoch) + i64(offset)


def unreferenced_prefix(tp: TopicIdPartition, epoch: int) -> bytes:
    return UNREFERENCED + tp_bytes(tp) + i32(epoch)


def unreferenced_key(tp: TopicIdPartition, epoch: int, segment: uuid.UUID) -> bytes:
    return unreferenced_prefix(tp, epoch) + segment.bytes


def epoch_key(tp: TopicIdPartition, epoch: int) -> bytes:
    return EPOCH + tp_bytes(tp) + i32(epoch)


def listing_key(tp: TopicIdPartition, start_offset: int, segment: uuid.UUID) -> bytes:
    return LISTING + tp_bytes(tp) + i64(start_offset) + segment.bytes


def partition_key(tp: TopicIdPartition) -> bytes:
    return PARTITION + tp_bytes(tp)


def lineage_key(tp: TopicIdPartition) -> bytes:
    return LINEAGE + tp_bytes(tp)


def log_start_key(tp: TopicIdPartition) -> bytes:
    return LOG_START + tp_bytes(tp)


def dispute_key(tp: TopicIdPartition) -> bytes:
    return DISPUTE + tp_bytes(tp)


def topic_prefix(name: str) -> bytes:
    return TOPIC + name.encode("utf-8") + b"\x00"


def topic_key(name: str, topic_id: uuid.UUID) -> bytes:
    return topic_prefix(name) + topic_id.bytes


# --- values ----------------------------------------------------------------------------------


def encode_segment(meta: RemoteLogSegmentMetadata) -> bytes:
    epochs = meta.segment_leader_epochs
    parts = [
        _SEGMENT.pack(
            meta.start_offset,
            meta.end_offset,
            meta.max_timestamp_ms,
            meta.broker_id,
            meta.event_timestamp_ms,
            meta.segment_size_in_bytes,
            int(meta.state),
            meta.txn_index_empty,
            len(epochs),
        ),
        *(_EPOCH_ENTRY.pack(e, o) for e, o in epochs),
    ]
    custom = meta.custom_metadata
    parts.append(_LEN.pack(-1 if custom is None else len(custom)))
    if custom is not None:
        parts.append(custom)
    return b"".join(parts)


def decode_segment(
    tp: TopicIdPartition, segment: uuid.UUID, data: bytes
) -> RemoteLogSegmentMetadata:
    start, end, max_ts, broker, event_ts, size, state, txn_empty, n = _SEGMENT.unpack_from(data)
    pos = _SEGMENT.size
    epochs = tuple(_EPOCH_ENTRY.unpack_from(data, pos + i * 12) for i in range(n))
    pos += n * 12
    (length,) = _LEN.unpack_from(data, pos)
    custom = None if length < 0 else bytes(data[pos + 4 : pos + 4 + length])
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, segment),
        start,
        end,
        max_ts,
        broker,
        event_ts,
        epochs,
        size,
        custom,
        SegmentState(state),
        txn_empty,
    )


@dataclass(frozen=True, slots=True)
class EpochState:
    """``RemoteLogLeaderEpochState`` minus its maps (those are keys): the highest log offset
    over finished segments and the KIP-852 running size of the epoch's listed segments."""

    highest_log_offset: int | None
    size: int

    def encode(self) -> bytes:
        highest = self.highest_log_offset
        return _EPOCH_STATE.pack(highest is not None, highest or 0, self.size)

    @classmethod
    def decode(cls, data: bytes) -> EpochState:
        has, highest, size = _EPOCH_STATE.unpack(data)
        return cls(highest if has else None, size)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Per partition: its delete state and the running totals over its live segments."""

    topic: str
    delete_state: PartitionDeleteState | None
    segment_count: int
    size: int

    def encode(self) -> bytes:
        state = -1 if self.delete_state is None else int(self.delete_state)
        head = _PARTITION.pack(state, self.segment_count, self.size)
        return head + self.topic.encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        state, count, size = _PARTITION.unpack_from(data)
        topic = data[_PARTITION.size :].decode("utf-8")
        return cls(topic, None if state < 0 else PartitionDeleteState(state), count, size)


def encode_lineage(segment: uuid.UUID, entries: list[tuple[int, int]]) -> bytes:
    return segment.bytes + b"".join(_EPOCH_ENTRY.pack(e, o) for e, o in entries)


def decode_lineage(data: bytes) -> tuple[uuid.UUID, list[tuple[int, int]]]:
    n = (len(data) - 16) // 12
    entries = [_EPOCH_ENTRY.unpack_from(data, 16 + i * 12) for i in range(n)]
    return uuid.UUID(bytes=data[:16]), [(int(e), int(o)) for e, o in entries]


def encode_dispute(segment: uuid.UUID, entries: list[tuple[int, int]], where: str) -> bytes:
    packed = b"".join(_EPOCH_ENTRY.pack(e, o) for e, o in entries)
    return segment.bytes + _LEN.pack(len(entries)) + packed + where.encode("utf-8")


def decode_dispute(data: bytes) -> tuple[uuid.UUID, list[tuple[int, int]], str]:
    n = _LEN.unpack_from(data, 16)[0] if len(data) >= 20 else -1
    if not 0 <= n <= (len(data) - 20) // 12:
        raise CorruptCheckpointError(f"a lineage dispute record of {len(data)} bytes is cut")
    entries = [_EPOCH_ENTRY.unpack_from(data, 20 + i * 12) for i in range(n)]
    where = data[20 + n * 12 :].decode("utf-8", "replace")
    return uuid.UUID(bytes=data[:16]), [(int(e), int(o)) for e, o in entries], where


def encode_time(value: int) -> bytes:
    return _Q.pack(value)


def decode_time(data: bytes) -> int:
    return int(_Q.unpack(data)[0])


FOLLOW: Final = b"f"
"""``f | metadata topic name | 0x00 | partition`` -> next offset to read (a follower's position,
written in the transaction of the events it applied)."""


def follow_prefix(metadata_topic: str) -> bytes:
    return FOLLOW + metadata_topic.encode() + b"\x00"


def follow_key(metadata_topic: str, partition: int) -> bytes:
    return follow_prefix(metadata_topic) + _U32.pack(partition)
