"""``__remote_log_metadata`` serde: spec golden bytes (remote-read-semantics.md §6.4), an
independent hand assembler per §6.3-§6.4, hypothesis round trips and corruption cases."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptMetadataRecordError, GatewayError
from gateway.kafka.uuids import decode_uuid
from gateway.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.serde import (
    ApiKey,
    MetadataPayload,
    MetadataRecord,
    RemoteLogSegmentMetadataSnapshot,
    decode_metadata_record,
    encode_metadata_record,
    encode_record,
)

INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1

TOPIC_ID = decode_uuid("AAAAAAAAAAAAAAAAAAAAAQ")
SEGMENT_UUID = decode_uuid("AAAAAAAAAAAAAAAAAAAAAg")
TP = TopicIdPartition(TOPIC_ID, 7, "foo")
SEGMENT_ID = RemoteLogSegmentId(TP, SEGMENT_UUID)
T0 = 1_700_000_000_000


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


# --- spec golden bytes -------------------------------------------------------------------------

TOPIC_ID_HEX = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
SEGMENT_ID_HEX = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02"
SEGMENT_ID_STRUCT = f"04 66 6F 6F | {TOPIC_ID_HEX} | 00 00 00 07 | 00 | {SEGMENT_ID_HEX} | 00"

UPDATE_GOLDEN = h(
    f"01 01 00 | {SEGMENT_ID_STRUCT} | 00 00 00 01 | 00 00 01 8B CF E5 68 00 | 00 | 01 | 00"
)
UPDATE = RemoteLogSegmentMetadataUpdate(
    SEGMENT_ID, T0, None, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1
)

SEGMENT_BODY_HEX = (
    "00 00 00 00 00 00 00 00 | 00 00 00 00 00 00 00 63 | 00 00 00 01"
    " | 00 00 01 8B CF E5 68 00 | 00 00 01 8B CF E5 68 01"
    " | 03 | 00 00 00 00 00 00 00 00 00 00 00 00 00 | 00 00 00 03 00 00 00 00 00 00 00 32 00"
    " | 00 00 40 00 | 00 | 00"
)
SEGMENT_GOLDEN = h(f"01 00 00 | {SEGMENT_ID_STRUCT} | {SEGMENT_BODY_HEX} | 00")
SEGMENT = RemoteLogSegmentMetadata(
    SEGMENT_ID,
    start_offset=0,
    end_offset=99,
    max_timestamp_ms=T0,
    broker_id=1,
    event_timestamp_ms=T0 + 1,
    segment_leader_epochs=((0, 0), (3, 50)),
    segment_size_in_bytes=16384,
)


def test_update_record_golden() -> None:
    assert len(UPDATE_GOLDEN) == 60
    assert encode_metadata_record(UPDATE) == UPDATE_GOLDEN
    record = decode_metadata_record(UPDATE_GOLDEN)
    assert record == MetadataRecord(UPDATE, 0)
    assert record.api_key is ApiKey.SEGMENT_UPDATE
    assert isinstance(record.payload, RemoteLogSegmentMetadataUpdate)
    assert record.payload.segment_id.partition.topic == "foo"


def test_segment_record_golden() -> None:
    assert len(SEGMENT_GOLDEN) == 115
    assert encode_metadata_record(SEGMENT) == SEGMENT_GOLDEN
    assert decode_metadata_record(SEGMENT_GOLDEN) == MetadataRecord(SEGMENT, 0)
    assert decode_metadata_record(memoryview(SEGMENT_GOLDEN)) == MetadataRecord(SEGMENT, 0)
    assert decode_metadata_record(bytearray(SEGMENT_GOLDEN)).api_key is ApiKey.SEGMENT


def test_txn_index_empty_tag_bytes() -> None:
    segment = RemoteLogSegmentMetadata(**{**_fields(SEGMENT), "txn_index_empty": True})
    raw = encode_metadata_record(segment)
    assert raw == SEGMENT_GOLDEN[:-1] + h("01 00 01 01")
    decoded = decode_metadata_record(raw).payload
    assert isinstance(decoded, RemoteLogSegmentMetadata)
    assert decoded.txn_index_empty
    # Java reads any non-zero byte as true
    assert decode_metadata_record(SEGMENT_GOLDEN[:-1] + h("01 00 01 7F")).payload == segment


def test_partition_delete_record() -> None:
    delete = RemotePartitionDeleteMetadata(
        TP, PartitionDeleteState.DELETE_PARTITION_STARTED, T0, broker_id=1
    )
    raw = h(
        f"01 02 00 | 04 66 6F 6F | {TOPIC_ID_HEX} | 00 00 00 07 | 00"
        " | 00 00 00 01 | 00 00 01 8B CF E5 68 00 | 01 | 00"
    )
    assert encode_metadata_record(delete) == raw
    assert decode_metadata_record(raw) == MetadataRecord(delete, 0)


def test_snapshot_record() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshot(
        SEGMENT_UUID, 0, 99, T0, 1, T0 + 1, ((0, 0), (3, 50)), 16384,
        custom_metadata=b"\xab", state=SegmentState.COPY_SEGMENT_FINISHED, txn_index_empty=True,
    )  # fmt: skip
    body = SEGMENT_BODY_HEX.replace("00 00 40 00 | 00 | 00", "00 00 40 00 | 02 AB | 01")
    raw = h(f"01 03 00 | {SEGMENT_ID_HEX} | {body} | 01 00 01 01")
    assert encode_metadata_record(snapshot) == raw
    record = decode_metadata_record(raw)
    assert record == MetadataRecord(snapshot, 0)
    assert record.api_key is ApiKey.SEGMENT_SNAPSHOT


# --- version 1 tags ----------------------------------------------------------------------------


def test_update_v1_tags() -> None:
    v1_golden = bytearray(UPDATE_GOLDEN)
    v1_golden[2] = 1
    # no tags: the schema defaults -1 / -1
    assert decode_metadata_record(bytes(v1_golden)) == MetadataRecord(UPDATE, 1, -1, -1)
    assert encode_metadata_record(UPDATE, 1, broker_leader_epoch=-1, end_offset=-1) == v1_golden
    tags = "02 | 00 04 00 00 00 05 | 01 08 00 00 00 00 00 00 00 63"
    raw = bytes(v1_golden[:-1]) + h(tags)
    assert encode_metadata_record(UPDATE, 1, broker_leader_epoch=5, end_offset=99) == raw
    assert decode_metadata_record(raw) == MetadataRecord(UPDATE, 1, 5, 99)


def test_segment_v1_tags() -> None:
    v1 = h("01 00 01") + SEGMENT_GOLDEN[3:]
    assert decode_metadata_record(v1) == MetadataRecord(SEGMENT, 1, 0)  # default 0
    segment = RemoteLogSegmentMetadata(**{**_fields(SEGMENT), "txn_index_empty": True})
    raw = v1[:-1] + h("02 | 00 01 01 | 01 04 00 00 00 09")
    assert encode_metadata_record(segment, 1, broker_leader_epoch=9) == raw
    assert decode_metadata_record(raw) == MetadataRecord(segment, 1, 9)
    encode_and_decode = decode_metadata_record(encode_metadata_record(SEGMENT, 1))
    assert encode_and_decode == MetadataRecord(SEGMENT, 1, 0)


def test_partition_delete_v1_tags() -> None:
    delete = RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_MARKED, 5, 2)
    raw = encode_metadata_record(delete, 1, broker_leader_epoch=4, end_offset=1000)
    assert raw.endswith(h("02 | 00 04 00 00 00 04 | 01 08 00 00 00 00 00 00 03 E8"))
    assert decode_metadata_record(raw) == MetadataRecord(delete, 1, 4, 1000)
    plain = encode_metadata_record(delete, 1)
    assert plain.endswith(h("00 | 00"))  # state 0, no tags: defaults 0 / 0 are not written
    assert decode_metadata_record(plain) == MetadataRecord(delete, 1, 0, 0)


def test_v1_tags_refused_in_version_0() -> None:
    with pytest.raises(CorruptMetadataRecordError, match="tag 1 is not valid for version 0"):
        decode_metadata_record(SEGMENT_GOLDEN[:-1] + h("01 01 04 00 00 00 09"))
    with pytest.raises(CorruptMetadataRecordError, match="tag 0 is not valid for version 0"):
        decode_metadata_record(UPDATE_GOLDEN[:-1] + h("01 00 04 00 00 00 05"))


def test_known_tag_of_wrong_size_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataRecordError, match="tag 0 has 2 bytes, expected 1"):
        decode_metadata_record(SEGMENT_GOLDEN[:-1] + h("01 00 02 01 01"))


def test_tag_order_and_repeats_follow_java() -> None:
    raw = h("01 01 01") + UPDATE_GOLDEN[3:-1]
    tags = "03 | 01 08 00 00 00 00 00 00 00 63 | 00 04 00 00 00 05 | 00 04 00 00 00 06"
    assert decode_metadata_record(raw + h(tags)) == MetadataRecord(UPDATE, 1, 6, 99)


def test_unknown_tags_are_skipped_everywhere() -> None:
    unknown = "01 | 1E 03 AA BB CC"  # one field, tag 30, 3 bytes
    raw = h(
        f"01 00 00 | 04 66 6F 6F | {TOPIC_ID_HEX} | 00 00 00 07 | {unknown}"
        f" | {SEGMENT_ID_HEX} | {unknown}"
        " | 00 00 00 00 00 00 00 00 | 00 00 00 00 00 00 00 63 | 00 00 00 01"
        " | 00 00 01 8B CF E5 68 00 | 00 00 01 8B CF E5 68 01"
        f" | 03 | 00 00 00 00 00 00 00 00 00 00 00 00 | {unknown}"
        " | 00 00 00 03 00 00 00 00 00 00 00 32 | 00"
        f" | 00 00 40 00 | 00 | 00 | 02 | 00 01 01 | 1E 03 AA BB CC"
    )
    segment = RemoteLogSegmentMetadata(**{**_fields(SEGMENT), "txn_index_empty": True})
    assert decode_metadata_record(raw) == MetadataRecord(segment, 0)


# --- framing and validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (h("00") + UPDATE_GOLDEN[1:], "frame version 0"),
        (h("02") + UPDATE_GOLDEN[1:], "frame version 2"),
        (h("01 04 00") + UPDATE_GOLDEN[3:], "unknown apiKey 4"),
        (h("01 01 02") + UPDATE_GOLDEN[3:], "version 2 is not supported"),
        (UPDATE_GOLDEN + h("00"), "1 byte"),
        (SEGMENT_GOLDEN + h("DE AD"), "2 byte"),
        (b"", "frame version at byte 0 runs past the end"),
        (h("81 80 80 80 80 00"), "longer than 5 bytes"),
        (h("80 80 80 80 08"), "frame version at byte 0 is 2147483648, over its limit 2147483647"),
        (h("01 01 00 | 80 80 80 80 08"), "topic name length at byte 3 is 2147483648"),
        (h("01 01 00 | 00") + UPDATE_GOLDEN[7:], "topic name at byte 3 is null"),
        (h("01 01 00 | 02 FF") + UPDATE_GOLDEN[7:], "not UTF-8"),
        (UPDATE_GOLDEN[:-2] + h("07 00"), "unknown RemoteLogSegmentState 7"),
        (UPDATE_GOLDEN[:-2] + h("FF 00"), "unknown RemoteLogSegmentState -1"),
    ],
)
def test_malformed_frames(raw: bytes, message: str) -> None:
    with pytest.raises(CorruptMetadataRecordError, match=message):
        decode_metadata_record(raw)


def _segment_with(body_hex: str) -> bytes:
    return h(f"01 00 00 | {SEGMENT_ID_STRUCT} | {body_hex} | 00")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("00 00 00 00 00 00 00 00 | 00 00 00 00 00 00 00 63", "FF" * 8 + " 00" * 7 + " 63",
         "start offset -1"),
        ("00 00 00 00 00 00 00 00 | 00 00 00 00 00 00 00 63", "00" * 7 + " 64" + " 00" * 7 + " 63",
         "SEGMENT v0: end offset 99 is outside"),
        ("03 | 00 00 00 00 00 00 00 00 00 00 00 00 00 | 00 00 00 03 00 00 00 00 00 00 00 32 00",
         "01", "segment_leader_epochs is empty"),
        ("03 | 00 00 00 00 00 00 00 00 00 00 00 00 00 | 00 00 00 03 00 00 00 00 00 00 00 32 00",
         "00", "SegmentLeaderEpochs at byte 81 is null"),
        ("00 00 00 03 00 00 00 00 00 00 00 32", "00" * 12, "repeats an epoch"),
        ("00 00 40 00", "80 00 40 00", "segment size -2147467264"),
        ("03 | 00 00 00 00", "FF FF FF FF 07 | 00 00 00 00", "cannot fit"),
    ],
)  # fmt: skip
def test_model_and_structure_failures_are_typed(old: str, new: str, message: str) -> None:
    assert old in SEGMENT_BODY_HEX
    with pytest.raises(CorruptMetadataRecordError, match=message) as info:
        decode_metadata_record(_segment_with(SEGMENT_BODY_HEX.replace(old, new, 1)))
    if "outside" in message or "empty" in message or "repeats" in message:
        assert isinstance(info.value.__cause__, ValueError)


def test_negative_partition_is_corrupt() -> None:
    raw = UPDATE_GOLDEN.replace(h("00 00 00 07"), h("FF FF FF FF"), 1)
    with pytest.raises(CorruptMetadataRecordError, match="partition -1 is outside"):
        decode_metadata_record(raw)


def test_encoder_refuses_what_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="only in version 1"):
        encode_metadata_record(UPDATE, 0, broker_leader_epoch=3)
    with pytest.raises(ValueError, match="version 2"):
        encode_metadata_record(UPDATE, 2)
    with pytest.raises(ValueError, match="no EndOffset"):
        encode_metadata_record(SEGMENT, 1, end_offset=5)
    with pytest.raises(ValueError, match="broker leader epoch"):
        encode_metadata_record(SEGMENT, 1, broker_leader_epoch=2**31)
    long_name = TopicIdPartition(TOPIC_ID, 0, "x" * 32768)
    too_long = RemotePartitionDeleteMetadata(long_name, PartitionDeleteState(0), 0, 0)
    with pytest.raises(ValueError, match="longer than 32767"):
        encode_metadata_record(too_long)
    with pytest.raises(TypeError):
        encode_metadata_record(object())  # type: ignore[arg-type]


# --- an independent assembler (plain int.to_bytes and concatenation, spec §6.3-§6.4) ----------


def _uv(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _i(value: int, width: int) -> bytes:
    return value.to_bytes(width, "big", signed=True)


def _tags(fields: list[tuple[int, bytes]]) -> bytes:
    return _uv(len(fields)) + b"".join(_uv(t) + _uv(len(v)) + v for t, v in fields)


def _tp(tp: TopicIdPartition) -> bytes:
    name = tp.topic.encode()
    return _uv(len(name) + 1) + name + tp.topic_id.bytes + _i(tp.partition, 4) + _tags([])


def _nbytes(value: bytes | None) -> bytes:
    return b"\x00" if value is None else _uv(len(value) + 1) + value


def _segment_tail(m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot) -> bytes:
    epochs = b"".join(_i(e, 4) + _i(o, 8) + _tags([]) for e, o in m.segment_leader_epochs)
    return (
        _i(m.start_offset, 8) + _i(m.end_offset, 8) + _i(m.broker_id, 4)
        + _i(m.max_timestamp_ms, 8) + _i(m.event_timestamp_ms, 8)
        + _uv(len(m.segment_leader_epochs) + 1) + epochs
        + _i(m.segment_size_in_bytes, 4) + _nbytes(m.custom_metadata) + _i(m.state, 1)
    )  # fmt: skip


def assemble(payload: MetadataPayload, version: int, epoch: int | None, end: int | None) -> bytes:
    fields: list[tuple[int, bytes]] = []
    if isinstance(payload, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot):
        if isinstance(payload, RemoteLogSegmentMetadata):
            key, head = 0, _tp(payload.segment_id.partition) + payload.segment_id.id.bytes + b"\0"
        else:
            key, head = 3, payload.segment_id.bytes
        body = head + _segment_tail(payload)
        if payload.txn_index_empty:
            fields.append((0, b"\x01"))
        if epoch:
            fields.append((1, _i(epoch, 4)))
    else:
        default = -1 if isinstance(payload, RemoteLogSegmentMetadataUpdate) else 0
        if isinstance(payload, RemoteLogSegmentMetadataUpdate):
            sid = payload.segment_id
            key, body = 1, _tp(sid.partition) + sid.id.bytes + b"\0" + _i(payload.broker_id, 4)
            body += _i(payload.event_timestamp_ms, 8) + _nbytes(payload.custom_metadata)
            body += _i(payload.state, 1)
        else:
            key, body = 2, _tp(payload.partition) + _i(payload.broker_id, 4)
            body += _i(payload.event_timestamp_ms, 8) + _i(payload.state, 1)
        if epoch is not None and epoch != default:
            fields.append((0, _i(epoch, 4)))
        if end is not None and end != default:
            fields.append((1, _i(end, 8)))
    return _uv(1) + _uv(key) + _uv(version) + body + _tags(fields)


# --- hypothesis --------------------------------------------------------------------------------

uuids = st.integers(0, 2**128 - 1).map(lambda i: uuid.UUID(int=i))
int32 = st.integers(-(2**31), INT32_MAX)
int64 = st.integers(-(2**63), INT64_MAX)
partitions = st.builds(TopicIdPartition, uuids, st.integers(0, INT32_MAX), st.text(max_size=12))
segment_ids = st.builds(RemoteLogSegmentId, partitions, uuids)
customs = st.one_of(st.none(), st.binary(max_size=40))
epoch_maps = st.dictionaries(
    st.integers(0, INT32_MAX), st.integers(0, INT64_MAX), min_size=1, max_size=4
).map(lambda d: tuple(d.items()))


@st.composite
def segment_fields(draw: st.DrawFn) -> dict[str, Any]:
    start = draw(st.integers(0, INT64_MAX))
    return {
        "start_offset": start,
        "end_offset": draw(st.integers(start, INT64_MAX)),
        "max_timestamp_ms": draw(int64),
        "broker_id": draw(int32),
        "event_timestamp_ms": draw(int64),
        "segment_leader_epochs": draw(epoch_maps),
        "segment_size_in_bytes": draw(st.integers(0, INT32_MAX)),
        "custom_metadata": draw(customs),
        "state": draw(st.sampled_from(SegmentState)),
        "txn_index_empty": draw(st.booleans()),
    }


payloads: st.SearchStrategy[MetadataPayload] = st.one_of(
    st.builds(lambda i, f: RemoteLogSegmentMetadata(i, **f), segment_ids, segment_fields()),
    st.builds(
        RemoteLogSegmentMetadataUpdate, segment_ids, int64, customs,
        st.sampled_from(SegmentState), int32,
    ),
    st.builds(
        RemotePartitionDeleteMetadata, partitions, st.sampled_from(PartitionDeleteState),
        int64, int32,
    ),
    st.builds(lambda i, f: RemoteLogSegmentMetadataSnapshot(i, **f), uuids, segment_fields()),
)  # fmt: skip


@st.composite
def records(draw: st.DrawFn) -> MetadataRecord:
    payload = draw(payloads)
    version = draw(st.sampled_from((0, 1)))
    if version == 0:
        return MetadataRecord(payload, 0)
    has_end = isinstance(payload, RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata)
    return MetadataRecord(payload, 1, draw(int32), draw(int64) if has_end else None)


def _topic(payload: MetadataPayload) -> str | None:
    if isinstance(payload, RemoteLogSegmentMetadataSnapshot):
        return None
    if isinstance(payload, RemotePartitionDeleteMetadata):
        return payload.partition.topic
    return payload.segment_id.partition.topic


@given(records())
def test_round_trip_and_independent_assembler(record: MetadataRecord) -> None:
    raw = encode_record(record)
    epoch, end = record.broker_leader_epoch, record.end_offset
    assert raw == assemble(record.payload, record.version, epoch, end)
    decoded = decode_metadata_record(raw)
    assert decoded == record
    assert _topic(decoded.payload) == _topic(record.payload)  # topic is not part of equality
    assert encode_record(decoded) == raw


@settings(max_examples=50, deadline=None)  # up to ~100 decodes per example: no time limit
@given(records())
def test_every_truncation_is_corrupt(record: MetadataRecord) -> None:
    raw = encode_record(record)
    for cut in range(len(raw)):
        with pytest.raises(CorruptMetadataRecordError):
            decode_metadata_record(raw[:cut])


@given(records(), st.data())
def test_byte_flips_give_a_record_or_a_typed_error(
    record: MetadataRecord, data: st.DataObject
) -> None:
    raw = bytearray(encode_record(record))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(GatewayError):
        decode_metadata_record(bytes(raw))


@given(st.sampled_from([b"", h("01 00 00"), h("01 01 01"), h("01 02 00"), h("01 03 01")]),
       st.binary(max_size=200))  # fmt: skip
def test_arbitrary_bytes_give_a_record_or_a_typed_error(prefix: bytes, tail: bytes) -> None:
    with contextlib.suppress(GatewayError):
        decode_metadata_record(prefix + tail)


def _fields(m: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {name: getattr(m, name) for name in RemoteLogSegmentMetadata.__dataclass_fields__}
