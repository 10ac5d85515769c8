"""Independent encoders against our reader, and our writer against kafka-python's reader."""

from __future__ import annotations

import pytest
from kafka.record.memory_records import MemoryRecords

from gateway.kafka import fast
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType, EndTransactionMarker, control_type
from tests.unit.kafka.independent import BUILDERS, Rec, as_broker, build

RECORDS = [
    Rec(0, 1_700_000_000_000, b"k", b"hello", [("h", b"v")]),
    Rec(1, 1_700_000_000_005, None, b"no key", []),
    Rec(2, 1_699_999_999_000, b"tombstone", None, [("null-header", None), ("", b"")]),
    Rec(3, 1_700_000_000_100, b"", b"", [("u\u00e9", b"\x00\xff")]),
    *[Rec(4 + i, 1_700_000_001_000 + i, b"key-%d" % i, b"v" * (i * 37), []) for i in range(40)],
]


@pytest.fixture(params=["fast", "reference"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "reference":
        monkeypatch.setattr(fast, "_CBatch", None)
    return str(request.param)


def _decoded(raw: bytes) -> list[tuple[object, ...]]:
    (batch,) = iter_batches(raw)
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]


def _expected(base: int, records: list[Rec], ts: int | None = None) -> list[tuple[object, ...]]:
    return [
        (base + r.offset_delta, ts if ts is not None else r.timestamp, r.key, r.value, r.headers)
        for r in records
    ]


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("codec", list(Codec))
def test_plain_batches(builder: str, codec: Codec, decoder: str) -> None:
    raw = as_broker(build(builder, 1000, RECORDS, codec=codec), leader_epoch=4)
    (batch,) = iter_batches(raw)
    assert batch.codec is codec and batch.partition_leader_epoch == 4 and batch.is_valid()
    assert batch.last_offset == 1000 + len(RECORDS) - 1
    assert _decoded(raw) == _expected(1000, RECORDS)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("codec", list(Codec))
def test_transactional_batches(builder: str, codec: Codec, decoder: str) -> None:
    raw = build(
        builder, 50, RECORDS[:5], codec=codec, transactional=True,
        producer_id=1000, producer_epoch=3, base_sequence=17,
    )  # fmt: skip
    (batch,) = iter_batches(raw)
    assert batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 3, 17)
    assert _decoded(raw) == _expected(50, RECORDS[:5])


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batches(builder: str, kind: ControlRecordType, decoder: str) -> None:
    marker = Rec(
        0, 1_700_000_000_000, bytes([0, 0, 0, int(kind)]), bytes.fromhex("000000000009"), []
    )
    raw = as_broker(
        build(builder, 77, [marker], transactional=True, producer_id=5, producer_epoch=0,
              base_sequence=-1),
        control=True,
    )  # fmt: skip
    (batch,) = iter_batches(raw)
    assert batch.is_control and batch.is_transactional
    (rec,) = batch.records()
    assert control_type(rec.key) is kind
    assert EndTransactionMarker.parse(rec.key, rec.value) == EndTransactionMarker(kind, 9)
    assert raw == end_txn_marker(
        77, kind, producer_id=5, producer_epoch=0, timestamp=1_700_000_000_000,
        coordinator_epoch=9,
    )  # fmt: skip


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_log_append_time_batches(builder: str, codec: Codec, decoder: str) -> None:
    raw = as_broker(build(builder, 0, RECORDS, codec=codec), log_append_time=1_800_000_000_000)
    assert _decoded(raw) == _expected(0, RECORDS, ts=1_800_000_000_000)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_our_uncompressed_bytes_equal_the_independent_builders(codec: Codec) -> None:
    """Byte-identical output for codecs whose framing is deterministic across encoders."""
    ours = build_batch(
        9,
        [
            RecordInput(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
            for r in RECORDS
        ],
        codec=codec,
    )
    for builder in BUILDERS:
        theirs = build(builder, 9, RECORDS, codec=codec)
        if codec is Codec.NONE:
            assert ours == theirs, builder
        else:
            assert ours[:17] == theirs[:17] and _decoded(ours) == _decoded(theirs), builder


@pytest.mark.parametrize("codec", list(Codec))
def test_kafka_python_reads_our_batches_with_crc_validation(codec: Codec) -> None:
    recs = [
        RecordInput(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp) for r in RECORDS
    ]
    segment = b"".join(
        [
            build_batch(0, recs, codec=codec, partition_leader_epoch=2),
            build_batch(
                len(recs), recs[:3], codec=codec, transactional=True, producer_id=7,
                producer_epoch=1, base_sequence=0,
            ),
            end_txn_marker(len(recs) + 3, ControlRecordType.COMMIT, producer_id=7,
                           producer_epoch=1, timestamp=1_700_000_000_000),
            build_batch(len(recs) + 4, recs[:2], codec=codec, log_append_time=1_800_000_000_000),
        ]
    )  # fmt: skip
    mr = MemoryRecords(segment)
    seen: list[tuple[object, ...]] = []
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        seen.extend((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch)
    ours = [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for b in iter_batches(segment)
        for r in b.records()
    ]
    assert seen == ours
    assert len(ours) == len(recs) + 3 + 1 + 2
