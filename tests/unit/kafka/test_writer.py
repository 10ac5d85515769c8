"""The segment writer against Kafka's rules, read back by kafka-python and by our indexes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType
from gateway.kafka.demo import write_demo_segment
from gateway.kafka.epoch import EpochEntry, parse_leader_epoch_checkpoint
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.producer_snapshot import parse_producer_snapshot
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import AbortedTxn, TransactionIndex
from gateway.kafka.writer import SegmentWriter


def _random_segment(tmp_path: Path, seed: int, base: int = 1000) -> tuple[SegmentWriter, Path]:
    rng = random.Random(seed)
    seg = SegmentWriter(base_offset=base)
    offset, ts = base, 1_700_000_000_000
    for _ in range(rng.randrange(20, 80)):
        n = rng.randrange(1, 30)
        recs = [
            RecordInput(rng.randbytes(rng.randrange(0, 400)), timestamp=ts + rng.randrange(-50, 50))
            for _ in range(n)
        ]
        codec = rng.choice(list(Codec))
        seg.append(build_batch(offset, recs, codec=codec, partition_leader_epoch=offset // 700))
        offset += n
        ts += rng.randrange(0, 100)
    seg.write(tmp_path)
    return seg, tmp_path / f"{base:020d}"


def _batches(path: Path) -> list[RecordBatch]:
    return list(iter_batches(path.with_suffix(".log").read_bytes()))


@pytest.mark.parametrize("seed", range(5))
def test_offset_index_has_an_entry_each_index_interval_bytes(tmp_path: Path, seed: int) -> None:
    _, stem = _random_segment(tmp_path, seed)
    batches = _batches(stem)
    # Closed form of LogSegment.append for one batch per append: an entry for the batch at P when
    # more than 4096 bytes lie between the previous entry's position (or 0) and P.
    expected, last_pos = [], 0
    for b in batches:
        if b.position - last_pos > 4096:
            expected.append((b.last_offset, b.position))
            last_pos = b.position
    index = OffsetIndex(stem.with_suffix(".index").read_bytes(), 1000)
    assert [tuple(e) for e in index.entries()] == expected
    assert len(expected) >= 2


@pytest.mark.parametrize("seed", range(3))
def test_offset_index_lookup_finds_every_offset(tmp_path: Path, seed: int) -> None:
    _, stem = _random_segment(tmp_path, seed)
    log = stem.with_suffix(".log").read_bytes()
    index = OffsetIndex(stem.with_suffix(".index").read_bytes(), 1000)
    by_offset = {r.offset: b.position for b in iter_batches(log) for r in b.records()}
    for offset, position in by_offset.items():
        start = index.lookup(offset).position
        first = next(b for b in iter_batches(log, start) if b.last_offset >= offset)
        assert first.position == position


@pytest.mark.parametrize("seed", range(3))
def test_time_index_tracks_the_growing_max_timestamp(tmp_path: Path, seed: int) -> None:
    _, stem = _random_segment(tmp_path, seed)
    batches = _batches(stem)
    index = TimeIndex(stem.with_suffix(".timeindex").read_bytes(), 1000)
    entries = list(index.entries())
    for ts, offset in entries:
        upto = [b.max_timestamp for b in batches if b.last_offset <= offset]
        assert max(upto) == ts  # "the largest timestamp seen up to offset O is T"
        assert any(b.last_offset == offset and b.max_timestamp == ts for b in batches)
    assert [e.timestamp for e in entries] == sorted({e.timestamp for e in entries})
    assert entries[-1].timestamp == max(b.max_timestamp for b in batches)  # forced on roll


def test_demo_segment_read_back_by_kafka_python_with_crc_validation(tmp_path: Path) -> None:
    files = write_demo_segment(tmp_path)
    data = files.log.read_bytes()
    mr = MemoryRecords(data)
    theirs = []
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        theirs.extend((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch)
    ours = [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for b in iter_batches(data)
        for r in b.records()
    ]
    assert theirs == ours and len(ours) == 173
    codecs = {b.codec for b in iter_batches(data)}
    assert codecs == set(Codec)


def test_demo_segment_transactions_epochs_and_snapshot(tmp_path: Path) -> None:
    files = write_demo_segment(tmp_path)
    assert files.txn_index is not None
    txns = list(TransactionIndex(files.txn_index.read_bytes(), 0))
    # pid 2000's transaction spans 167..171, its ABORT marker is 172; pid 1000 committed before,
    # so no other transaction is open and the LSO is the marker offset + 1.
    assert txns == [AbortedTxn(2000, 167, 172, 173)]
    epochs = parse_leader_epoch_checkpoint(files.leader_epoch_checkpoint.read_bytes())
    assert epochs == [EpochEntry(0, 0), EpochEntry(3, 150)]
    assert files.producer_snapshot.name == "00000000000000000173.snapshot"
    snap = {e.producer_id: e for e in parse_producer_snapshot(files.producer_snapshot.read_bytes())}
    assert set(snap) == {1000, 2000}
    assert snap[2000].last_offset == 172 and snap[2000].current_txn_first_offset == -1


def test_lso_of_an_abort_while_another_transaction_is_open(tmp_path: Path) -> None:
    seg = SegmentWriter()
    txn = {"transactional": True, "producer_epoch": 0, "base_sequence": 0}
    seg.append(build_batch(0, [RecordInput(b"a", timestamp=1)], producer_id=1, **txn))  # type: ignore[arg-type]
    seg.append(build_batch(1, [RecordInput(b"b", timestamp=2)], producer_id=2, **txn))  # type: ignore[arg-type]
    seg.append(
        end_txn_marker(2, ControlRecordType.ABORT, producer_id=2, producer_epoch=0, timestamp=3)
    )
    seg.append(
        end_txn_marker(3, ControlRecordType.ABORT, producer_id=1, producer_epoch=0, timestamp=4)
    )
    files = seg.write(tmp_path)
    assert files.txn_index is not None
    assert list(TransactionIndex(files.txn_index.read_bytes(), 0)) == [
        AbortedTxn(2, 1, 2, 0),  # producer 1's transaction from offset 0 was still open
        AbortedTxn(1, 0, 3, 4),
    ]


def test_offsets_must_move_forward() -> None:
    seg = SegmentWriter(base_offset=10)
    seg.append(build_batch(10, [RecordInput(b"a", timestamp=1)]))
    with pytest.raises(ValueError, match="below the log end"):
        seg.append(build_batch(10, [RecordInput(b"a", timestamp=1)]))
