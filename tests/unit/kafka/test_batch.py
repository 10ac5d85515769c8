"""Record batch v2: the spec's golden batch, framing tolerance, attributes, CRC, records."""

from __future__ import annotations

import struct

import pytest

from gateway.errors import (
    CorruptRecordError,
    CrcMismatchError,
    LegacyFormatError,
    UnsupportedFormatError,
)
from gateway.kafka import fast
from gateway.kafka.batch import HEADER_SIZE, RecordBatch, iter_batches
from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType, EndTransactionMarker, control_type

# kafka-formats.md §2.4, built there with aiokafka's DefaultRecordBatchBuilder.
GOLDEN = bytes.fromhex(
    "0000000000000000 00000042 FFFFFFFF 02 C622ACFA 0000 00000000"
    "0000018BCFE56800 0000018BCFE56800 FFFFFFFFFFFFFFFF FFFF FFFFFFFF 00000001"
    "20 00 00 00 026B 0A68656C6C6F 02 02680276"
)


@pytest.fixture(params=["fast", "reference"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through the C fast path and through the reference decoder alone."""
    if request.param == "reference":
        monkeypatch.setattr(fast, "_CBatch", None)
    return str(request.param)


def _one(data: bytes) -> RecordBatch:
    (batch,) = iter_batches(data)
    return batch


def test_golden_batch_decodes_field_by_field(decoder: str) -> None:
    batch = _one(GOLDEN)
    assert len(GOLDEN) == 78 == batch.size_in_bytes
    assert (batch.base_offset, batch.batch_length, batch.partition_leader_epoch) == (0, 66, -1)
    assert (batch.magic, batch.crc, batch.attributes) == (2, 0xC622ACFA, 0)
    assert (batch.base_timestamp, batch.max_timestamp) == (1700000000000, 1700000000000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.last_offset == 0 and batch.next_offset == 1 and batch.records_count == 1
    assert batch.codec is Codec.NONE and batch.timestamp_type == 0
    assert not (batch.is_transactional or batch.is_control or batch.has_delete_horizon)
    assert batch.is_valid()
    (rec,) = batch.records()
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (0, 1700000000000, b"k", b"hello")
    assert rec.headers == [("h", b"v")]


def test_builder_reproduces_golden_bytes() -> None:
    rec = RecordInput(b"hello", key=b"k", headers=[("h", b"v")], timestamp=1700000000000)
    assert build_batch(0, [rec]) == GOLDEN


def test_leader_epoch_is_outside_the_crc() -> None:
    stored = GOLDEN[:12] + struct.pack(">i", 7) + GOLDEN[16:]
    batch = _one(stored)
    assert batch.partition_leader_epoch == 7
    assert batch.is_valid()


def test_crc_mismatch_is_typed_and_names_the_batch(decoder: str) -> None:
    bad = bytearray(GOLDEN)
    bad[-1] ^= 0x01
    batch = _one(bytes(bad))
    assert not batch.is_valid()
    with pytest.raises(CrcMismatchError, match="position 0 \\(base offset 0\\)"):
        batch.records()


def test_truncated_tail_ends_the_stream_cleanly() -> None:
    two = GOLDEN + build_batch(1, [RecordInput(b"v", timestamp=5)])
    for cut in range(len(GOLDEN), len(two)):
        assert [b.base_offset for b in iter_batches(two[:cut])] == [0]
    assert [b.base_offset for b in iter_batches(two)] == [0, 1]
    assert list(iter_batches(GOLDEN[:16])) == []


def test_start_position_frames_from_the_middle() -> None:
    two = GOLDEN + build_batch(1, [RecordInput(b"v", timestamp=5)])
    (batch,) = iter_batches(two, len(GOLDEN))
    assert (batch.base_offset, batch.position) == (1, len(GOLDEN))


@pytest.mark.parametrize("size", [-1, 0, 13])
def test_size_below_minimum_is_corrupt(size: int) -> None:
    bad = GOLDEN[:8] + struct.pack(">i", size) + GOLDEN[12:]
    with pytest.raises(CorruptRecordError, match="below the minimum of 14"):
        list(iter_batches(bad))


def test_v2_size_below_header_is_corrupt() -> None:
    bad = GOLDEN[:8] + struct.pack(">i", 20) + GOLDEN[12:]
    with pytest.raises(CorruptRecordError, match="v2 minimum of 49"):
        list(iter_batches(bad))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_refused_clearly(magic: int) -> None:
    bad = GOLDEN[:16] + bytes([magic]) + GOLDEN[17:]
    with pytest.raises(LegacyFormatError, match="legacy format \\(magic 0/1\\) not supported"):
        list(iter_batches(bad))


def test_unknown_magic_is_refused() -> None:
    with pytest.raises(UnsupportedFormatError, match="unknown magic 3"):
        list(iter_batches(GOLDEN[:16] + b"\x03" + GOLDEN[17:]))


def test_negative_record_count_is_corrupt(decoder: str) -> None:
    batch = _one(build_batch(0, [RecordInput(b"v", timestamp=1)]))
    raw = bytearray(batch.view)
    struct.pack_into(">i", raw, 57, -1)
    with pytest.raises(CorruptRecordError, match="invalid record count -1"):
        _one(bytes(raw)).records(verify_crc=False)


def test_log_append_time_gives_every_record_the_max_timestamp(decoder: str) -> None:
    recs = [RecordInput(b"a", timestamp=100), RecordInput(b"b", timestamp=250)]
    batch = _one(build_batch(10, recs, log_append_time=9999))
    assert batch.timestamp_type == 1 and batch.max_timestamp == 9999
    assert [r.timestamp for r in batch.records()] == [9999, 9999]
    create = _one(build_batch(10, recs))
    assert [r.timestamp for r in create.records()] == [100, 250]


def test_null_key_value_and_header_value(decoder: str) -> None:
    rec = RecordInput(None, key=None, headers=[("a", None), ("", b"")], timestamp=3)
    (out,) = _one(build_batch(0, [rec])).records()
    assert out.key is None and out.value is None
    assert out.headers == [("a", None), ("", b"")]


def test_no_timestamp_is_minus_one_as_in_kafka(decoder: str) -> None:
    (out,) = _one(build_batch(0, [RecordInput(b"v")])).records()
    assert out.timestamp == -1


def test_offset_gaps_and_last_offset_delta(decoder: str) -> None:
    recs = [RecordInput(b"a", offset_delta=0), RecordInput(b"b", offset_delta=7)]
    batch = _one(build_batch(100, recs, last_offset_delta=9))
    assert batch.last_offset == 109
    assert [r.offset for r in batch.records()] == [100, 107]


def test_delete_horizon_attribute(decoder: str) -> None:
    batch = _one(build_batch(0, [RecordInput(b"v", timestamp=50)], delete_horizon_ms=40))
    assert batch.has_delete_horizon and batch.delete_horizon_ms == 40
    (rec,) = batch.records()
    assert rec.timestamp == 50


def test_empty_batch_from_compaction(decoder: str) -> None:
    batch = _one(build_batch(5, [], last_offset_delta=3, producer_id=9, producer_epoch=1))
    assert batch.records() == [] and batch.last_offset == 8


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_round_trips(codec: Codec, decoder: str) -> None:
    recs = [
        RecordInput(b"value-%d" % i * 20, key=b"k%d" % i, timestamp=1000 + i) for i in range(50)
    ]
    batch = _one(build_batch(42, recs, codec=codec, partition_leader_epoch=3))
    assert batch.codec is codec and batch.is_valid()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in batch.records()]
    assert got == [(42 + i, r.timestamp, r.key, r.value) for i, r in enumerate(recs)]


def test_record_length_mismatch_is_corrupt(decoder: str) -> None:
    raw = bytearray(build_batch(0, [RecordInput(b"hello", timestamp=1)]))
    raw[HEADER_SIZE] += 2  # record length varint: 2 more than its payload
    raw += b"\x00"
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptRecordError):
        _one(bytes(raw)).records(verify_crc=False)


def test_trailing_bytes_after_last_record_are_corrupt(decoder: str) -> None:
    raw = bytearray(build_batch(0, [RecordInput(b"hello", timestamp=1)])) + b"\x00\x00"
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptRecordError, match=r"remain|unconsumed"):
        _one(bytes(raw)).records(verify_crc=False)


def test_invalid_utf8_header_key_is_replaced_as_java_does(decoder: str) -> None:
    raw = bytearray(build_batch(0, [RecordInput(b"v", headers=[("hé", b"x")], timestamp=1)]))
    i = raw.index("é".encode())
    raw[i : i + 2] = b"\xff\xfe"
    (rec,) = _one(bytes(raw)).records(verify_crc=False)
    assert rec.headers == [("h\ufffd\ufffd", b"x")]


def test_negative_header_key_length_is_corrupt(decoder: str) -> None:
    raw = bytearray(build_batch(0, [RecordInput(b"v", headers=[("h", b"x")], timestamp=1)]))
    i = raw.index(b"\x02h\x02x")
    raw[i] = 0x01  # varint -1
    with pytest.raises(CorruptRecordError):
        _one(bytes(raw)).records(verify_crc=False)


@pytest.mark.parametrize("kind", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_end_transaction_markers(kind: ControlRecordType, decoder: str) -> None:
    raw = end_txn_marker(
        77, kind, producer_id=1000, producer_epoch=2, timestamp=5, coordinator_epoch=5
    )
    batch = _one(raw)
    assert batch.is_control and batch.is_transactional and batch.producer_id == 1000
    (rec,) = batch.records()
    assert rec.key == bytes([0, 0, 0, int(kind)])
    assert rec.value == bytes.fromhex("000000000005")
    assert control_type(rec.key) is kind
    assert EndTransactionMarker.parse(rec.key, rec.value) == EndTransactionMarker(kind, 5)


def test_control_types_by_name() -> None:
    names = {control_type(bytes([0, 0, 0, i])).name for i in range(7)}
    assert names == {
        "ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER",
        "KRAFT_VERSION", "KRAFT_VOTERS",
    }  # fmt: skip
    assert control_type(b"\x00\x00\x00\x63") is ControlRecordType.UNKNOWN
    assert control_type(b"\x00\x05\x00\x01") is ControlRecordType.COMMIT  # newer key version
    with pytest.raises(CorruptRecordError, match="at least 4 bytes"):
        control_type(b"\x00\x00\x01")
    with pytest.raises(CorruptRecordError, match="at least 6 bytes"):
        EndTransactionMarker.parse(b"\x00\x00\x00\x00", b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError, match="not an end-transaction marker"):
        EndTransactionMarker.parse(b"\x00\x00\x00\x02", b"\x00" * 6)
