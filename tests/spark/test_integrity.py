"""Issue 13 on the Spark path: a read either equals the written records or is a typed error.

Each test damages one object of a copy of a small bucket (no chunk transform, so the ``.log``
and ``.indexes`` bytes are the original segment files) in a way the reader before the shared
read core served silently (missing records, wrong leader epochs, aborted records under
read_committed), then plans and reads every split in this process (no Spark; the executor code
is plain Python). The last tests run the same damage through a DataFrame on the local Spark
session: the typed error must reach the job's failure text.
"""

from __future__ import annotations

import importlib
import logging
import re
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fixtures.extras import require_spark

require_spark()

from pyspark.sql import SparkSession

from gateway.errors import (
    ConfigurationError,
    CorruptDataError,
    CorruptIndexError,
    CorruptManifestError,
    CorruptRecordError,
    RemoteGapError,
    TransactionPendingError,
)
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.writer import SegmentWriter
from gateway.read.framing import SegmentFramer
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import IndexType, SegmentManifest, parse_manifest
from gateway.remote.tiering import TieringOptions
from gateway.spark.driver import build_plan
from gateway.spark.options import parse_options
from gateway.spark.plan import SegmentRef
from gateway.spark.read import read_split
from gateway.spark.segments import frame
from gateway.spark.source import TieredKafkaDataSource
from tests.spark.support import PREFIX, Bucket, PartitionData, TopicSpec, write_bucket
from tests.unit.kafka.independent import Rec, build

TOPIC = "t"
SPEC = TopicSpec(TOPIC, TieringOptions(chunk_size=1024), partitions=2)
TXN_ENTRY = 34  # version, producer id, first, last, last stable offset


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("integrity"), (SPEC,))


@dataclass
class Segment:
    key: ObjectKey  # the .log object's
    path: Path
    manifest: SegmentManifest
    batches: list[RecordBatch]

    @property
    def start(self) -> int:
        return self.key.start_offset

    @property
    def end(self) -> int:
        return self.batches[-1].last_offset

    def index_piece(self, kind: IndexType) -> tuple[Path, int, int]:
        """The ``.indexes`` file, and where ``kind`` sits in it."""
        piece = self.manifest.segment_indexes[kind]
        assert piece is not None
        return self.path.with_suffix(".indexes"), piece.position, piece.size

    def offset_index(self) -> OffsetIndex:
        path, position, size = self.index_piece(IndexType.OFFSET)
        return OffsetIndex(path.read_bytes()[position : position + size], self.start)


@dataclass
class Damaged:
    """A copy of the clean bucket to damage."""

    bucket: Bucket
    root: Path

    def segments(self, partition: int = 0) -> list[Segment]:
        out = []
        for path in self.root.glob(f"{PREFIX}{TOPIC}-*/{partition}/*.log"):
            key = parse_object_key(str(path.relative_to(self.root)), PREFIX)
            manifest = parse_manifest(path.with_suffix(".rsm-manifest").read_bytes(), key.key)
            batches = list(iter_batches(path.read_bytes()))
            out.append(Segment(key, path, manifest, batches))
        return sorted(out, key=lambda s: s.start)

    def data(self, partition: int = 0) -> PartitionData:
        return self.bucket.topics[TOPIC][partition]

    def options(self, **extra: str) -> dict[str, str]:
        return {**self.bucket.options(TOPIC), "store": self.root.as_uri(), **extra}

    def read(self, **extra: str) -> list[tuple[int, int, int | None]]:
        """(partition, offset, leader epoch) of every record, split by split."""
        plan = build_plan(parse_options(self.options(**extra)))
        rows = []
        for split in plan.splits:
            for batch in read_split(split, plan.context):
                rows += [(r["partition"], r["offset"], r["leaderEpoch"]) for r in batch.to_pylist()]
        return rows

    def delete(self, segment: Segment) -> None:
        for suffix in Suffix:
            (self.root / segment.key.with_suffix(suffix).key).unlink()


def patch(path: Path, position: int, fmt: str, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, position, value)
    path.write_bytes(bytes(data))


@pytest.fixture
def damaged(clean: Bucket, tmp_path: Path) -> Damaged:
    root = tmp_path / "bucket"
    shutil.copytree(clean.root / "bucket", root)
    return Damaged(clean, root)


def test_the_clean_copy_reads_back_as_written(damaged: Damaged) -> None:
    rows = damaged.read(partitions="0", maxBytesPerPartition="2000")
    assert rows == [(0, r.offset, r.epoch) for r in damaged.data().records]


# --- framing -----------------------------------------------------------------------------------


def _ends_with_records(segments: list[Segment]) -> Segment:
    return next(s for s in segments[:-1] if not s.batches[-1].is_control)


def test_a_batch_length_past_the_segment_end_is_corrupt(damaged: Damaged) -> None:
    """Before: the broker's "truncated tail": the segment's last batch vanished, 200 OK."""
    segment = _ends_with_records(damaged.segments())
    last = segment.batches[-1]
    patch(segment.path, last.position + 8, ">i", last.batch_length + 100)
    with pytest.raises(CorruptRecordError, match=r"runs 100 bytes past the segment"):
        damaged.read(partitions="0")


def test_a_flipped_leader_epoch_is_corrupt(damaged: Damaged) -> None:
    """Before: ``partitionLeaderEpoch`` is outside the CRC; the rows carried the wrong one."""
    segment = damaged.segments()[2]
    batch = segment.batches[3]
    patch(segment.path, batch.position + 12, ">i", batch.partition_leader_epoch ^ 0x10)
    with pytest.raises(CorruptRecordError, match=r"carries leader epoch .* leader-epoch map"):
        damaged.read(partitions="0")


def _entry_slot(index: OffsetIndex, segment: Segment, *, skip_next: bool) -> int:
    """An entry whose batch is followed by another batch before the next entry (skip_next),
    or whose next entry's batch holds at least two records."""
    starts = {b.position: b for b in segment.batches}
    entries = list(index.entries())
    for slot, (_, position) in enumerate(entries[:-1]):
        after = [b for b in segment.batches if b.position > position]
        following = entries[slot + 1].position
        if skip_next and after and after[0].position < following:
            return slot
        if not skip_next and starts[following].last_offset > starts[following].base_offset:
            return slot
    raise AssertionError("no suitable offset-index entry in the fixture")


def test_an_index_entry_pointing_past_its_batch_is_corrupt(damaged: Damaged) -> None:
    """Before: a read from the entry's offset started at a later batch, skipping records."""
    segment = damaged.segments()[1]
    index = segment.offset_index()
    slot = _entry_slot(index, segment, skip_next=True)
    offset, position = index.entry(slot)
    later = next(b for b in segment.batches if b.position > position)
    path, at, _ = segment.index_piece(IndexType.OFFSET)
    patch(path, at + slot * 8 + 4, ">i", later.position)  # still strictly increasing
    with pytest.raises(CorruptRecordError, match=r"after the offset-index entry"):
        damaged.read(partitions="0", startingOffsets=str(offset))


def test_an_index_that_breaks_its_order_is_refused_before_use(damaged: Damaged) -> None:
    segment = damaged.segments()[1]
    path, at, size = segment.index_piece(IndexType.OFFSET)
    assert size >= 16
    patch(path, at + 12, ">i", -5)  # the second entry's position
    with pytest.raises(CorruptIndexError, match=r"\.indexes: offset index entries"):
        damaged.read(partitions="0", startingOffsets=str(segment.start + 1))


def test_an_index_entry_that_ends_a_range_too_early_is_corrupt(damaged: Damaged) -> None:
    """Before: a range ending inside a segment stopped at the entry's position and lost the
    last offsets of the range."""
    segment = damaged.segments()[1]
    index = segment.offset_index()
    slot = _entry_slot(index, segment, skip_next=False)
    following = next(b for b in segment.batches if b.position == index.entry(slot + 1).position)
    hi = following.base_offset + 1  # the range's last offset is the first of that batch
    path, at, _ = segment.index_piece(IndexType.OFFSET)
    patch(path, at + slot * 8, ">i", following.base_offset - segment.start)
    with pytest.raises(CorruptIndexError, match=rf"offset index puts offset {hi - 1} before"):
        damaged.read(partitions="0", endingOffsets=str(hi))


class _Reader:
    """``iter_range`` of a SyncSegmentReader over bytes, in small pieces."""

    def __init__(self, data: bytes, step: int = 100) -> None:
        self.data, self.step = data, step

    def iter_range(self, segment: object, start: int, end: int) -> Iterator[bytes]:
        end = min(end, len(self.data))
        for lo in range(start, end, self.step):
            yield self.data[lo : min(lo + self.step, end)]


def _log() -> tuple[bytes, SegmentRef, list[RecordBatch]]:
    writer = SegmentWriter(base_offset=500)
    for i in range(8):
        recs = [Rec(d, 1, b"k", bytes(40 + i), []) for d in range(1 + i % 3)]
        writer.append(build("aiokafka-c", writer.next_offset, recs))
    log = bytes(writer.log)
    batches = list(iter_batches(log))
    return log, SegmentRef("seg.log", 500, batches[-1].last_offset, len(log), True, 0), batches


def _frame(log: bytes, ref: SegmentRef, framer: SegmentFramer, end: int) -> list[RecordBatch]:
    return list(frame(cast(Any, _Reader(log)), cast(Any, None), framer, end))


def test_a_split_ends_exactly_at_its_end_byte_and_the_next_batch_continues_it() -> None:
    log, ref, batches = _log()
    cut = batches[4].position
    got = _frame(log, ref, SegmentFramer(ref.bounds), cut)
    assert [b.base_offset for b in got] == [b.base_offset for b in batches[:4]]
    # the next split's side: from the entry at the cut to the end (the end checks)
    after = _frame(log, ref, SegmentFramer(ref.bounds, cut, batches[4].last_offset), len(log))
    assert [b.base_offset for b in after] == [b.base_offset for b in batches[4:]]
    # a cut that is not a batch boundary: the batch before it runs past the split's end
    with pytest.raises(CorruptRecordError, match=r"seg\.log: record batch at byte .* past byte"):
        _frame(log, ref, SegmentFramer(ref.bounds), cut - 1)
    # the batch at the cut starts at another offset (baseOffset is outside the CRC)
    damaged = bytearray(log)
    struct.pack_into(">q", damaged, cut, batches[4].base_offset + 1)
    with pytest.raises(CorruptRecordError, match=r"at byte \d+ starts at offset .* ended at"):
        _frame(bytes(damaged), ref, SegmentFramer(ref.bounds), cut)
    # a segment whose last batch ends before the endOffset of its metadata
    short = SegmentRef(ref.key, ref.start_offset, ref.end_offset + 1, ref.size, True, 0)
    with pytest.raises(CorruptRecordError, match=r"metadata says"):
        _frame(log, short, SegmentFramer(short.bounds), len(log))


# --- the lineage and failOnDataLoss -------------------------------------------------------------


def test_a_hole_in_the_lineage_fails_or_is_skipped_with_fail_on_data_loss(
    damaged: Damaged, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the walk hopped from the segment before the hole to the one after it."""
    gone = damaged.segments()[2]
    damaged.delete(gone)
    hole = rf"{gone.start}\.\.{gone.end}"
    with pytest.raises(RemoteGapError, match=rf"holds offsets {hole}") as info:
        damaged.read(partitions="0")
    assert (info.value.start, info.value.end) == (gone.start, gone.end)
    with caplog.at_level(logging.WARNING, logger="gateway.spark.driver"):
        rows = damaged.read(partitions="0", failOnDataLoss="false")
    assert rows == [
        (0, r.offset, r.epoch)
        for r in damaged.data().records
        if not gone.start <= r.offset <= gone.end
    ]
    assert f"offsets {gone.start}..{gone.end}" in caplog.text
    assert "failOnDataLoss=false" in caplog.text
    with pytest.raises(RemoteGapError, match=rf"holds offsets {hole}"):
        damaged.read(partitions="0", **{"isolation.level": "read_committed"})


def test_an_unreadable_manifest_is_named_where_its_segment_is_missing(damaged: Damaged) -> None:
    middle, last = damaged.segments()[1], damaged.segments()[-1]
    middle.path.with_suffix(".rsm-manifest").write_bytes(b"{not json")
    manifest = middle.key.with_suffix(Suffix.MANIFEST).key
    with pytest.raises(RemoteGapError, match=rf"{middle.start}\.\..*{manifest}"):
        damaged.read(partitions="0")
    # a timestamp search that passes over it cannot know the answer is not in it
    ts = next(t for o, t in damaged.data().stamps if o > middle.end)
    with pytest.raises(CorruptManifestError, match=rf"answer may be in .*{manifest}"):
        damaged.read(partitions="0", startingTimestamp=str(ts))
    # the last segment: its offsets lie after the remote log end the readable segments give
    last.path.with_suffix(".rsm-manifest").write_bytes(b"{not json")
    tail = last.key.with_suffix(Suffix.MANIFEST).key
    with pytest.raises(CorruptManifestError, match=rf"after the remote log end.*{tail}"):
        damaged.read(partitions="0", startingOffsets=str(middle.end + 1))


def test_fail_on_data_loss_is_a_boolean_option_on_by_default() -> None:
    base = {"store": "file:///b", "topic": "t"}
    assert parse_options(base).fail_on_data_loss
    assert not parse_options({**base, "failOnDataLoss": "FALSE"}).fail_on_data_loss
    for value in ("maybe", ""):
        with pytest.raises(ConfigurationError, match="failOnDataLoss"):
            parse_options({**base, "failOnDataLoss": value})


# --- read_committed -----------------------------------------------------------------------------


def _txn_segment(damaged: Damaged) -> tuple[int, Segment]:
    for p in range(SPEC.partitions):
        for segment in damaged.segments(p):
            piece = segment.manifest.segment_indexes[IndexType.TRANSACTION]
            if piece is not None and piece.size >= TXN_ENTRY:
                return p, segment
    raise AssertionError("no transaction index in the fixture")


def test_a_transaction_index_with_another_producer_is_corrupt(damaged: Damaged) -> None:
    """Before: the aborted transaction's records were returned as committed."""
    p, segment = _txn_segment(damaged)
    path, at, _ = segment.index_piece(IndexType.TRANSACTION)
    pid = struct.unpack_from(">q", path.read_bytes(), at + 2)[0]
    patch(path, at + 2, ">q", pid + 1)
    committed = {"isolation.level": "read_committed", "partitions": str(p)}
    with pytest.raises(CorruptIndexError, match=r"marker says aborted, the transaction index"):
        damaged.read(**committed)
    assert len(damaged.read(partitions=str(p))) == len(damaged.data(p).records)  # uncommitted


def _open_at_segment_end(damaged: Damaged) -> tuple[int, int, int]:
    """(partition, segment number, first offset of the oldest open transaction) of a segment
    that ends inside a transaction and has two segments after it (from the batches)."""
    for p in range(SPEC.partitions):
        segments = damaged.segments(p)
        open_pids: dict[int, int] = {}  # producer id -> its open transaction's first offset
        for n, segment in enumerate(segments[:-2]):
            for batch in segment.batches:
                if batch.is_control:
                    open_pids.pop(batch.producer_id, None)
                elif batch.is_transactional:
                    open_pids.setdefault(batch.producer_id, batch.base_offset)
            if open_pids:
                return p, n, min(open_pids.values())
    raise AssertionError("no transaction spans a segment roll in the fixture")


def test_a_transaction_without_its_marker_in_the_remote_tier_is_pending(damaged: Damaged) -> None:
    """Before: read_committed returned it (no index entry, so not aborted)."""
    p, n, first_open = _open_at_segment_end(damaged)
    segments = damaged.segments(p)
    # a hole after the read's range: the marker may be in it
    damaged.delete(segments[n + 1])
    committed = {"isolation.level": "read_committed", "partitions": str(p)}
    with pytest.raises(RemoteGapError, match=r"its marker may be lost"):
        damaged.read(endingOffsets=str(segments[n].end + 1), **committed)
    # nothing after the segment: the marker is not tiered yet
    for segment in segments[n + 2 :]:
        damaged.delete(segment)
    with pytest.raises(TransactionPendingError, match=r"no COMMIT or ABORT marker"):
        damaged.read(endingOffsets=str(segments[n].end + 1), **committed)
    # "latest" is the remote last stable offset, as a broker's for read_committed: the open
    # transaction's first offset (from the segment's producer snapshot)
    stable = [r.offset for r in damaged.data(p).committed() if r.offset < first_open]
    assert [o for _, o, _ in damaged.read(**committed)] == stable
    wanted = [r.offset for r in damaged.data(p).records if r.offset <= segments[n].end]
    assert [o for _, o, _ in damaged.read(partitions=str(p))] == wanted  # uncommitted


# --- timestamps ---------------------------------------------------------------------------------


def test_a_time_index_entry_past_the_answer_is_corrupt(damaged: Damaged) -> None:
    """Before: the search started after the first record at the timestamp and answered a later
    offset."""
    segment = damaged.segments()[1]
    path, at, size = segment.index_piece(IndexType.TIMESTAMP)
    raw = path.read_bytes()[at : at + size]
    entries = [struct.unpack_from(">qi", raw, i) for i in range(0, size, 12)]
    assert len(entries) >= 3
    ts, rel = entries[0]
    later = entries[1][1]  # the next entry's offset: the index keeps its order
    assert later > rel and entries[1][0] > ts
    patch(path, at + 8, ">i", later)
    with pytest.raises(CorruptIndexError, match=r"time index entry"):
        build_plan(parse_options(damaged.options(partitions="0", startingTimestamp=str(ts))))


def test_a_segment_hiding_the_timestamp_behind_its_manifest_is_corrupt(damaged: Damaged) -> None:
    segment = damaged.segments()[1]
    manifest = segment.path.with_suffix(".rsm-manifest")
    meta = segment.manifest.remote_log_segment_metadata
    assert meta is not None
    text = manifest.read_bytes()
    wanted = f'"maxTimestampMs":{meta.max_timestamp_ms}'.encode()
    assert text.count(wanted) == 1
    lower = meta.max_timestamp_ms - 1500
    manifest.write_bytes(text.replace(wanted, f'"maxTimestampMs":{lower}'.encode()))
    with pytest.raises(CorruptManifestError, match=r"maxTimestampMs is"):
        build_plan(parse_options(damaged.options(partitions="0", startingTimestamp=str(lower + 1))))


# --- through Spark ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tk(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark


def _count(spark: SparkSession, options: dict[str, str]) -> int:
    return spark.read.format("tiered-kafka").options(**options).load().count()


def _failure(spark: SparkSession, options: dict[str, str], kind: type[Exception]) -> str:
    """The text of the job's failure, whose Python error (Spark passes on its traceback) must
    be a ``kind``."""
    with pytest.raises(Exception) as info:  # Spark wraps the executor's error
        _count(spark, options)
    text = str(info.value)
    names = re.findall(r"\b(gateway(?:\.\w+)+)\.(\w+): ", text)
    assert names, text
    module, name = names[-1]
    raised = getattr(importlib.import_module(module), name)
    assert issubclass(raised, kind), text
    return text


def test_spark_jobs_fail_with_the_typed_error(tk: SparkSession, damaged: Damaged) -> None:
    # one partition: a transaction index naming another producer under read_committed
    p, txn_segment = _txn_segment(damaged)
    path, at, _ = txn_segment.index_piece(IndexType.TRANSACTION)
    patch(path, at + 2, ">q", struct.unpack_from(">q", path.read_bytes(), at + 2)[0] + 1)
    # the other: a batch running past its segment's end (an executor's error)
    segment = _ends_with_records(damaged.segments(1 - p))
    last = segment.batches[-1]
    patch(segment.path, last.position + 8, ">i", last.batch_length + 100)
    text = _failure(tk, damaged.options(partitions=str(1 - p)), CorruptRecordError)
    assert f"{segment.key.key}: record batch at byte {last.position} runs 100 bytes past" in text
    committed = damaged.options(partitions=str(p), **{"isolation.level": "read_committed"})
    text = _failure(tk, committed, CorruptIndexError)
    assert "transaction index says committed" in text


def test_spark_fail_on_data_loss(tk: SparkSession, damaged: Damaged) -> None:
    gone = damaged.segments(1)[2]
    damaged.delete(gone)
    text = _failure(tk, damaged.options(partitions="1"), RemoteGapError)
    assert f"{gone.start}..{gone.end}" in text
    kept = [r for r in damaged.data(1).records if not gone.start <= r.offset <= gone.end]
    assert _count(tk, damaged.options(partitions="1", failOnDataLoss="false")) == len(kept)


def test_corrupt_data_errors_name_the_object(damaged: Damaged) -> None:
    segment = damaged.segments()[0]
    patch(segment.path, segment.batches[2].position + 8, ">i", 3)  # below the v2 minimum
    with pytest.raises(CorruptDataError, match=rf"{segment.key.key}: record batch at byte"):
        damaged.read(partitions="0")
