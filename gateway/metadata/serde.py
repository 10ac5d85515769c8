"""Values of the ``__remote_log_metadata`` topic (``remote-read-semantics.md`` §6.2-§6.4).

Mirrors ``org.apache.kafka.server.log.remote.metadata.storage.serialization.
RemoteLogMetadataSerde`` with its ``BytesApiMessageSerde`` framing (``AbstractApiMessageSerde``)
and the generated ``RemoteLogSegmentMetadataRecord``, ``RemoteLogSegmentMetadataUpdateRecord``,
``RemotePartitionDeleteMetadataRecord`` and ``RemoteLogSegmentMetadataSnapshotRecord``
(``storage/src/main/resources/message/*.json``, flexible versions 0+, valid versions 0-1)::

    frame    uvarint frameVersion (= 1) | uvarint apiKey | uvarint version | body; no trailing bytes
    body     the flexible encoding (§6.3, module gateway.metadata.flexible): compact strings
             (never null here), nullable compact bytes (``bytes?``), compact arrays (never
             null), and a tagged-field section (``tags``) ending every struct

    TopicIdPartition  = Name string, Id uuid, Partition int32, tags
    RemoteLogSegmentId = TopicIdPartition, Id uuid (segment), tags
    SegmentLeaderEpoch = LeaderEpoch int32, Offset int64, tags        (ascending epochs)
    apiKey 0 segment    RemoteLogSegmentId, StartOffset int64, EndOffset int64, BrokerId int32,
                        MaxTimestampMs int64, EventTimestampMs int64, []SegmentLeaderEpoch,
                        SegmentSizeInBytes int32, CustomMetadata bytes?, State int8, tags
                        tag 0 TxnIndexEmpty bool (v0+, default false), tag 1 BrokerLeaderEpoch
                        int32 (v1+, default 0)
    apiKey 1 update     RemoteLogSegmentId, BrokerId int32, EventTimestampMs int64,
                        CustomMetadata bytes?, State int8, tags
                        tag 0 BrokerLeaderEpoch int32 (v1+, default -1), tag 1 EndOffset int64
                        (v1+, default -1)
    apiKey 2 delete     TopicIdPartition, BrokerId int32, EventTimestampMs int64, State int8, tags
                        tag 0 BrokerLeaderEpoch int32 (v1+, default 0), tag 1 EndOffset int64
                        (v1+, default 0)
    apiKey 3 snapshot   SegmentId uuid, then as apiKey 0 from StartOffset on (same tags)

A v0 update: ``01 01 00 | 04 'foo' | <topic id> | 00 00 00 07 | 00 | <segment id> | 00 |
00 00 00 01 | <event time int64> | 00 | 01 | 00`` (60 bytes with topic "foo").

Decisions:

* Decoding returns a :class:`MetadataRecord`: the model event (or, for apiKey 3, a
  :class:`RemoteLogSegmentMetadataSnapshot`), the record version, and the v1 fields the model
  has no place for (``broker_leader_epoch``, ``end_offset``); ``None`` when the version lacks
  them, the schema default when v1 omits the tag.
* Tags are read as the generated Java readers do (see :mod:`gateway.metadata.flexible`).
  Stricter than Java besides the flexible rules: a repeated leader epoch (Java keeps the last)
  and every model-validation failure are corruption.
* Encoding writes version 0 by default (what released Kafka writes), tagged fields only when
  they differ from their default, leader epochs in ascending order.

Every malformed input raises :class:`~gateway.errors.CorruptMetadataRecordError`.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from gateway.kafka.ints import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, check_int
from gateway.kafka.varint import encode_uvarint
from gateway.metadata.flexible import (
    BOOL,
    EMPTY_TAGS,
    INT8,
    INT32,
    INT64,
    Reader,
    TagSchema,
    corrupt,
    put_array_length,
    put_nullable_bytes,
    put_string,
    put_tags,
)
from gateway.metadata.model import (
    MetadataEvent,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
    check_segment_fields,
)

__all__ = [
    "FRAME_VERSION",
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "MetadataPayload",
    "MetadataRecord",
    "RemoteLogSegmentMetadataSnapshot",
    "decode_metadata_record",
    "encode_metadata_record",
    "encode_record",
]

FRAME_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (0, 1)

_SEGMENT_FIXED: Final = struct.Struct(">qqiqq")  # start, end, broker, max ts, event ts
_EPOCH_ENTRY: Final = struct.Struct(">iq")  # leader epoch, start offset
_MIN_EPOCH_ENTRY: Final = _EPOCH_ENTRY.size + 1  # + an empty tag section
_UPDATE_FIXED: Final = struct.Struct(">iq")  # broker, event ts
_DELETE_FIXED: Final = struct.Struct(">iqb")  # broker, event ts, state


class ApiKey(IntEnum):
    """``MetadataRecordType`` ids of the four records."""

    SEGMENT = 0
    SEGMENT_UPDATE = 1
    PARTITION_DELETE = 2
    SEGMENT_SNAPSHOT = 3


_SEGMENT_TAGS: Final[TagSchema] = {0: (0, BOOL, 0), 1: (1, INT32, 0)}
_UPDATE_TAGS: Final[TagSchema] = {0: (1, INT32, -1), 1: (1, INT64, -1)}
_DELETE_TAGS: Final[TagSchema] = {0: (1, INT32, 0), 1: (1, INT64, 0)}
_NO_TAGS: Final[TagSchema] = {}
_TAG_TXN_EMPTY, _TAG_SEGMENT_EPOCH = 0, 1
_TAG_EPOCH, _TAG_END_OFFSET = 0, 1
# StartOffset, EndOffset, MaxTimestampMs, BrokerId, EventTimestampMs, SegmentLeaderEpochs,
# SegmentSizeInBytes, CustomMetadata, RemoteLogSegmentState: the model's field order
_SegmentBody = tuple[
    int, int, int, int, int, tuple[tuple[int, int], ...], int, bytes | None, SegmentState
]


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """``RemoteLogSegmentMetadataSnapshot`` (apiKey 3): a segment without its partition, from
    the former on-disk snapshot; never produced to the topic."""

    segment_id: uuid.UUID
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
        if not isinstance(self.segment_id, uuid.UUID):
            raise ValueError("segment id must be a uuid.UUID")
        epochs = check_segment_fields(self, None)
        object.__setattr__(self, "state", SegmentState(self.state))
        object.__setattr__(self, "segment_leader_epochs", epochs)


MetadataPayload = MetadataEvent | RemoteLogSegmentMetadataSnapshot


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded value: the payload plus what the frame and v1 tags carry besides it.

    ``broker_leader_epoch`` (every record type) and ``end_offset`` (update and partition
    delete) are ``None`` in version 0, which lacks them.
    """

    payload: MetadataPayload
    version: int = 0
    broker_leader_epoch: int | None = None
    end_offset: int | None = None

    @property
    def api_key(self) -> ApiKey:
        return _api_key(self.payload)


def _api_key(payload: object) -> ApiKey:
    if isinstance(payload, RemoteLogSegmentMetadata):
        return ApiKey.SEGMENT
    if isinstance(payload, RemoteLogSegmentMetadataUpdate):
        return ApiKey.SEGMENT_UPDATE
    if isinstance(payload, RemotePartitionDeleteMetadata):
        return ApiKey.PARTITION_DELETE
    if isinstance(payload, RemoteLogSegmentMetadataSnapshot):
        return ApiKey.SEGMENT_SNAPSHOT
    raise TypeError(f"not a remote log metadata record: {type(payload).__name__}")


# --- reading ---------------------------------------------------------------------------------


def _read_partition(r: Reader) -> TopicIdPartition:
    name = r.string("topic name")
    topic_id = r.uuid("topic id")
    (partition,) = r.fixed(INT32, "partition")
    r.tags("TopicIdPartition", _NO_TAGS, 0)
    return TopicIdPartition(topic_id, partition, name)


def _read_segment_id(r: Reader) -> RemoteLogSegmentId:
    partition = _read_partition(r)
    segment = r.uuid("segment id")
    r.tags("RemoteLogSegmentId", _NO_TAGS, 0)
    return RemoteLogSegmentId(partition, segment)


def _read_segment_body(r: Reader) -> _SegmentBody:
    """StartOffset through RemoteLogSegmentState, shared by apiKeys 0 and 3."""
    start, end, broker, max_ts, event_ts = r.fixed(_SEGMENT_FIXED, "segment offsets")
    count = r.array_length("SegmentLeaderEpochs", _MIN_EPOCH_ENTRY)
    epochs: list[tuple[int, int]] = []
    for _ in range(count):
        epoch, offset = r.fixed(_EPOCH_ENTRY, "leader epoch entry")
        epochs.append((epoch, offset))
        r.tags("SegmentLeaderEpochEntry", _NO_TAGS, 0)
    (size,) = r.fixed(INT32, "SegmentSizeInBytes")
    custom = r.nullable_bytes("CustomMetadata")
    state = _segment_state(r.fixed(INT8, "RemoteLogSegmentState")[0])
    return start, end, max_ts, broker, event_ts, tuple(epochs), size, custom, state


def _segment_state(value: int) -> SegmentState:
    try:
        return SegmentState(value)
    except ValueError as exc:
        raise corrupt(f"unknown RemoteLogSegmentState {value}") from exc


def _delete_state(value: int) -> PartitionDeleteState:
    try:
        return PartitionDeleteState(value)
    except ValueError as exc:
        raise corrupt(f"unknown RemotePartitionDeleteState {value}") from exc


def decode_metadata_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode one ``__remote_log_metadata`` value. Raises
    :class:`~gateway.errors.CorruptMetadataRecordError`."""
    r = Reader(memoryview(data).cast("B"))
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise corrupt(f"frame version {frame} (only {FRAME_VERSION} is supported)")
    key, version = r.uvarint("apiKey"), r.uvarint("version")
    try:
        api_key = ApiKey(key)
    except ValueError as exc:
        raise corrupt(f"unknown apiKey {key}") from exc
    if version not in SUPPORTED_VERSIONS:
        raise corrupt(f"{api_key.name} version {version} is not supported (0-1)")
    try:
        record = _decode_body(r, api_key, version)
    except ValueError as exc:  # the model refused a field
        raise corrupt(f"{api_key.name} v{version}: {exc}") from exc
    if r.pos != len(r.buf):
        raise corrupt(f"{len(r.buf) - r.pos} byte(s) of garbage after {api_key.name}")
    return record


def _decode_body(r: Reader, api_key: ApiKey, version: int) -> MetadataRecord:
    v1 = version >= 1
    if api_key is ApiKey.SEGMENT_UPDATE:
        segment_id = _read_segment_id(r)
        broker, event_ts = r.fixed(_UPDATE_FIXED, "update broker and event time")
        custom = r.nullable_bytes("CustomMetadata")
        state = _segment_state(r.fixed(INT8, "RemoteLogSegmentState")[0])
        tags = r.tags("RemoteLogSegmentMetadataUpdateRecord", _UPDATE_TAGS, version)
        update = RemoteLogSegmentMetadataUpdate(segment_id, event_ts, custom, state, broker)
        return MetadataRecord(update, version, tags.get(_TAG_EPOCH), tags.get(_TAG_END_OFFSET))
    if api_key is ApiKey.PARTITION_DELETE:
        partition = _read_partition(r)
        broker, event_ts, raw_state = r.fixed(_DELETE_FIXED, "partition delete fields")
        delete_state = _delete_state(raw_state)
        tags = r.tags("RemotePartitionDeleteMetadataRecord", _DELETE_TAGS, version)
        delete = RemotePartitionDeleteMetadata(partition, delete_state, event_ts, broker)
        return MetadataRecord(delete, version, tags.get(_TAG_EPOCH), tags.get(_TAG_END_OFFSET))
    payload: MetadataPayload
    if api_key is ApiKey.SEGMENT:
        segment_id = _read_segment_id(r)
        body = _read_segment_body(r)
        tags = r.tags("RemoteLogSegmentMetadataRecord", _SEGMENT_TAGS, version)
        payload = RemoteLogSegmentMetadata(segment_id, *body, bool(tags[_TAG_TXN_EMPTY]))
    else:
        snapshot_id = r.uuid("SegmentId")
        body = _read_segment_body(r)
        tags = r.tags("RemoteLogSegmentMetadataSnapshotRecord", _SEGMENT_TAGS, version)
        payload = RemoteLogSegmentMetadataSnapshot(snapshot_id, *body, bool(tags[_TAG_TXN_EMPTY]))
    return MetadataRecord(payload, version, tags[_TAG_SEGMENT_EPOCH] if v1 else None)


# --- writing ---------------------------------------------------------------------------------


def _put_partition(out: bytearray, tp: TopicIdPartition) -> None:
    put_string(out, tp.topic, "topic name")
    out += tp.topic_id.bytes + INT32.pack(tp.partition) + EMPTY_TAGS


def _put_segment_id(out: bytearray, segment: RemoteLogSegmentId) -> None:
    _put_partition(out, segment.partition)
    out += segment.id.bytes + EMPTY_TAGS


def _put_segment_body(
    out: bytearray, m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot
) -> None:
    out += _SEGMENT_FIXED.pack(
        m.start_offset, m.end_offset, m.broker_id, m.max_timestamp_ms, m.event_timestamp_ms
    )
    put_array_length(out, len(m.segment_leader_epochs))
    for epoch, offset in m.segment_leader_epochs:
        out += _EPOCH_ENTRY.pack(epoch, offset) + EMPTY_TAGS
    out += INT32.pack(m.segment_size_in_bytes)
    put_nullable_bytes(out, m.custom_metadata)
    out += INT8.pack(m.state)


def encode_metadata_record(
    payload: MetadataPayload,
    version: int = 0,
    *,
    broker_leader_epoch: int | None = None,
    end_offset: int | None = None,
) -> bytes:
    """Serialize ``payload`` as a framed ``__remote_log_metadata`` value.

    ``broker_leader_epoch`` and ``end_offset`` exist only in version 1 (``end_offset`` only for
    updates and partition deletes); ``None`` means the schema default, which is not written.
    Raises ``ValueError`` for a value the format cannot carry and ``TypeError`` for a payload
    that is not a metadata record.
    """
    api_key = _api_key(payload)
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"version {version} is not supported (0-1)")
    if version == 0 and (broker_leader_epoch is not None or end_offset is not None):
        raise ValueError("BrokerLeaderEpoch and EndOffset exist only in version 1")
    if broker_leader_epoch is not None:
        check_int("broker leader epoch", broker_leader_epoch, INT32_MIN, INT32_MAX)
    if end_offset is not None:
        if api_key in (ApiKey.SEGMENT, ApiKey.SEGMENT_SNAPSHOT):
            raise ValueError(f"{api_key.name} has no EndOffset tag")
        check_int("end offset", end_offset, INT64_MIN, INT64_MAX)
    out = bytearray(encode_uvarint(FRAME_VERSION) + encode_uvarint(api_key))
    out += encode_uvarint(version)
    fields: list[tuple[int, bytes]] = []
    if isinstance(payload, RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata):
        if isinstance(payload, RemoteLogSegmentMetadataUpdate):
            _put_segment_id(out, payload.segment_id)
            out += _UPDATE_FIXED.pack(payload.broker_id, payload.event_timestamp_ms)
            put_nullable_bytes(out, payload.custom_metadata)
            out += INT8.pack(payload.state)
            schema = _UPDATE_TAGS
        else:
            _put_partition(out, payload.partition)
            out += _DELETE_FIXED.pack(payload.broker_id, payload.event_timestamp_ms, payload.state)
            schema = _DELETE_TAGS
        for tag, value in ((_TAG_EPOCH, broker_leader_epoch), (_TAG_END_OFFSET, end_offset)):
            if value is not None and value != schema[tag][2]:
                fields.append((tag, schema[tag][1].pack(value)))
    else:
        if isinstance(payload, RemoteLogSegmentMetadata):
            _put_segment_id(out, payload.segment_id)
        else:
            out += payload.segment_id.bytes
        _put_segment_body(out, payload)
        if payload.txn_index_empty:
            fields.append((_TAG_TXN_EMPTY, b"\x01"))
        if broker_leader_epoch is not None and broker_leader_epoch != 0:
            fields.append((_TAG_SEGMENT_EPOCH, INT32.pack(broker_leader_epoch)))
    put_tags(out, fields)
    return bytes(out)


def encode_record(record: MetadataRecord) -> bytes:
    """:func:`encode_metadata_record` of a decoded record (its version and v1 fields)."""
    return encode_metadata_record(
        record.payload,
        record.version,
        broker_leader_epoch=record.broker_leader_epoch,
        end_offset=record.end_offset,
    )
