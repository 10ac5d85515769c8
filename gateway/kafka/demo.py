"""A deterministic demo segment that exercises every batch kind the reader handles."""

from __future__ import annotations

from pathlib import Path

from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType
from gateway.kafka.writer import SegmentFiles, SegmentWriter

DEMO_BASE_TIMESTAMP = 1_700_000_000_000


def _records(first: int, count: int, ts: int) -> list[RecordInput]:
    return [
        RecordInput(
            value=f"order {first + i}: ".encode() + b"x" * 180,
            key=f"customer-{(first + i) % 7}".encode(),
            headers=[("source", b"demo"), ("trace", None)] if i % 3 == 0 else (),
            timestamp=ts + i,
        )
        for i in range(count)
    ]


def write_demo_segment(directory: Path) -> SegmentFiles:
    """Plain, producer-compressed (every codec), LogAppendTime, tombstone, committed and
    aborted transactions, and two leader epochs; large enough for several index entries."""
    seg = SegmentWriter(base_offset=0)
    ts = DEMO_BASE_TIMESTAMP
    offset = 0
    epoch = 0
    for codec in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.NONE):
        recs = _records(offset, 25, ts)
        seg.append(build_batch(offset, recs, codec=codec, partition_leader_epoch=epoch))
        offset += len(recs)
        ts += 1000
    epoch = 3  # a leader change
    recs = [RecordInput(value=None, key=b"customer-1", timestamp=ts)]  # a tombstone
    seg.append(build_batch(offset, recs, partition_leader_epoch=epoch))
    offset += 1
    recs = _records(offset, 10, ts)
    seg.append(build_batch(offset, recs, log_append_time=ts + 500, partition_leader_epoch=epoch))
    offset += len(recs)
    ts += 1000
    for pid, outcome in ((1000, ControlRecordType.COMMIT), (2000, ControlRecordType.ABORT)):
        recs = _records(offset, 5, ts)
        seg.append(
            build_batch(
                offset,
                recs,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
                transactional=True,
                partition_leader_epoch=epoch,
            )
        )
        offset += len(recs)
        seg.append(
            end_txn_marker(
                offset,
                outcome,
                producer_id=pid,
                producer_epoch=0,
                timestamp=ts + 10,
                partition_leader_epoch=epoch,
            )
        )
        offset += 1
        ts += 1000
    return seg.write(directory)
