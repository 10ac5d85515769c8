"""Planning and executor reads without Spark: options, split cuts, bounds, records.

Everything here runs in this process (no SparkSession): the driver's plan and each split's
Arrow batches are compared with the records the independent encoders wrote.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pytest

from gateway.cli import main as cli_main
from gateway.errors import ConfigurationError, UnknownTopicOrPartitionError
from gateway.kafka.batch import iter_batches
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.writer import SegmentWriter
from gateway.spark.columns import arrow_schema
from gateway.spark.driver import ReadPlan, build_plan
from gateway.spark.options import parse_options
from gateway.spark.plan import SegmentRef, Split, plan_partition, split_byte_range
from gateway.spark.read import read_split
from gateway.spark.read_options import EARLIEST, LATEST, Bound, BoundKind
from tests.spark.support import Bucket, Expected, write_bucket
from tests.unit.kafka.independent import Rec, build

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("plan"))


def read_all(plan: ReadPlan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for split in plan.splits:
        for batch in read_split(split, plan.context):
            assert batch.schema.equals(arrow_schema(plan.context.include_headers))
            assert 0 < batch.num_rows <= plan.context.max_rows
            rows += batch.to_pylist()
    return rows


def as_expected(row: dict[str, Any]) -> tuple[object, ...]:
    millis = (row["timestamp"] - EPOCH) // timedelta(milliseconds=1)
    headers = tuple((h["key"], h["value"]) for h in row.get("headers") or ())
    return (row["partition"], row["offset"], row["key"], row["value"], millis,
            row["timestampType"], row["leaderEpoch"], headers)  # fmt: skip


def expected_rows(records: list[Expected], partition: int) -> list[tuple[object, ...]]:
    return [
        (partition, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch, r.headers)
        for r in records
    ]


# --- options -----------------------------------------------------------------------------------


def test_options_defaults_and_spark_names() -> None:
    opts = parse_options({"store": "file:///b", "subscribe": "t", "kafka.bootstrap.servers": "x"})
    assert (opts.topic, opts.partitions, opts.start.default, opts.end.default) == (
        "t", None, EARLIEST, LATEST,
    )  # fmt: skip
    assert opts.isolation == "read_uncommitted" and not opts.include_headers
    opts = parse_options(
        {
            "PATH": "file:///b",
            "assign": '{"t":[2,0]}',
            "startingOffsets": '{"t":{"0":23,"2":-2}}',
            "endingOffsets": '{"t":{"0":-1,"2":40}}',
            "kafka.isolation.level": "READ_COMMITTED",
            "includeHeaders": "true",
        }
    )
    assert opts.partitions_of("t") == (0, 2) and opts.isolation == "read_committed"
    assert opts.start.for_partition("t", 0) == Bound(BoundKind.OFFSET, 23)
    assert opts.start.for_partition("t", 2) == EARLIEST
    assert opts.end.for_partition("t", 0) == LATEST
    assert opts.end.for_partition("t", 2) == Bound(BoundKind.OFFSET, 40)
    assert opts.end.for_partition("t", 1) == LATEST  # not listed: the default
    # Spark's precedence: a global timestamp wins over per-partition ones and over offsets.
    opts = parse_options(
        {
            "store": "file:///b",
            "topic": "t",
            "startingTimestamp": "5",
            "startingOffsetsByTimestamp": '{"t":{"0":7}}',
            "startingOffsets": "latest",
            "endingOffsetsByTimestamp": '{"t":{"1":9}}',
            "endingOffsets": "12",
        }
    )
    assert opts.start.for_partition("t", 0) == Bound(BoundKind.TIMESTAMP, 5)
    assert opts.end.for_partition("t", 1) == Bound(BoundKind.TIMESTAMP, 9)
    assert opts.end.for_partition("t", 0) == LATEST


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t"}, "store"),
        ({"store": "file:///b"}, "topic"),
        ({"store": "file:///b", "topic": "t", "isolation.level": "dirty"}, "isolation.level"),
        ({"store": "file:///b", "topic": "t", "endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets"),
        ({"store": "file:///b", "topic": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"store": "file:///b", "topic": "t", "startingOffsets": '{"u":{"0":1}}'}, "'u'"),
        ({"store": "file:///b", "topic": "t", "startingOffsets": "[1]"}, "startingOffsets"),
        ({"store": "file:///b", "topic": "t", "startingTimestamp": "-5"}, "startingTimestamp"),
        ({"store": "file:///b", "topic": "t", "maxBytesPerPartition": "0"}, "maxBytesPer"),
        ({"store": "file:///b", "topic": "t", "includeHeaders": "maybe"}, "includeHeaders"),
        ({"store": "file:///b", "topic": "t", "partitions": "a"}, "partitions"),
        ({"store": "file:///b", "topic": "t", "startingOfsets": "earliest"}, "startingofsets"),
        ({"store": "file:///b", "topic": "a,b"}, "topic"),
        ({"store": "file:///b", "subscribePattern": "(a"}, "subscribePattern"),
        ({"store": "file:///b", "topic": "t", "kafka.max.poll.records": "5"}, "kafka.max.poll"),
        ({"store": "file:///b", "topic": "t", "minPartitions": "0"}, "minPartitions"),
        ({"store": "file:///b", "topic": "t", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        (
            {"store": "file:///b", "subscribe": "t,u", "topicId": "AAAAAAAAAAAAAAAAAAAAAA"},
            "topicId",
        ),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        parse_options(options)


# --- split cuts --------------------------------------------------------------------------------


def _segment(rng: random.Random) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """A segment with batches of random sizes and offset gaps; (log, index, batch spans)."""
    writer = SegmentWriter(base_offset=1000, index_interval_bytes=200)
    for i in range(150):
        offset = writer.next_offset + (3 if i % 17 == 5 else 0)  # gaps, as after compaction
        recs = [Rec(d, 1, b"k", rng.randbytes(rng.randint(0, 400)), []) for d in range(
            rng.randint(1, 6))]  # fmt: skip
        writer.append(build("aiokafka-c", offset, recs))
    spans = [(b.base_offset, b.last_offset) for b in iter_batches(bytes(writer.log))]
    index = b"".join(
        ((o - 1000).to_bytes(4, "big") + p.to_bytes(4, "big")) for o, p in writer._offset_entries
    )
    return bytes(writer.log), index, spans


@pytest.mark.parametrize("seed", range(4))
def test_parts_cover_each_batch_once(seed: int) -> None:
    rng = random.Random(seed)
    log, index_bytes, spans = _segment(rng)
    index = OffsetIndex(index_bytes, 1000)
    last = spans[-1][1]
    ref = SegmentRef("k", 1000, last, len(log), True, 0)
    batch_at = {b.position: (b.base_offset, b.last_offset) for b in iter_batches(log)}
    for lo, hi in [(1000, last + 1), (1000 + rng.randrange(300), last + 1),
                   (1000, 1000 + rng.randrange(200, 500)), (1100, 1101)]:  # fmt: skip
        for parts in (1, 2, 3, 7, 40):
            got: list[int] = []
            previous_end = None
            for k in range(parts):
                start, end = split_byte_range(Split("t", 0, ref, lo, hi, k, parts), index)
                if start == end:
                    continue
                assert start in batch_at and (end in batch_at or end == len(log))
                assert previous_end is None or start == previous_end  # contiguous
                previous_end = end
                for batch in iter_batches(log[start:end]):
                    got += [o for o in range(batch.base_offset, batch.last_offset + 1)
                            if lo <= o < hi]  # fmt: skip
            wanted = [o for b, e in spans for o in range(b, e + 1) if lo <= o < hi]
            assert got == wanted, (lo, hi, parts)


def test_parts_from_estimated_bytes() -> None:
    ref = SegmentRef("k", 0, 999, 1000 * 1024, False, 0)
    assert [s.parts for s in plan_partition("t", 0, [(ref, 0, 1000)], 300 * 1024)] == [4] * 4
    # a quarter of the offsets: about a quarter of the bytes
    assert len(plan_partition("t", 0, [(ref, 750, 1000)], 300 * 1024)) == 1
    assert plan_partition("t", 0, [(ref, 5, 5)], 1) == []


# --- plan and read, every topic ---------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("max_bytes", ["134217728", "900"])
def test_reads_equal_the_written_records(bucket: Bucket, isolation: str, max_bytes: str) -> None:
    for topic, partitions in bucket.topics.items():
        opts = bucket.options(
            topic, includeHeaders="true", maxBytesPerPartition=max_bytes, maxRowsPerBatch="50",
            **{"isolation.level": isolation},
        )  # fmt: skip
        plan = build_plan(parse_options(opts))
        segments = sum(p.segments for p in partitions.values())
        if max_bytes == "900":
            assert len(plan.splits) > 2 * segments  # split segments
        else:
            assert len(plan.splits) == segments  # the displaced upload is not read
        got = sorted(as_expected(r) for r in read_all(plan))
        wanted = []
        for p, data in partitions.items():
            records = data.committed() if isolation == "read_committed" else data.records
            wanted += expected_rows(records, p)
        assert got == sorted(wanted), topic


def _first_at_or_after(stamps: list[tuple[int, int]], ts: int, end: int) -> int:
    return next((o for o, t in stamps if t >= ts), end)


def test_offset_and_timestamp_bounds(bucket: Bucket) -> None:
    data = bucket.topics["zipped"]
    p0, p1 = data[0], data[1]
    opts = bucket.options(
        "zipped",
        startingOffsets='{"zipped":{"0":17,"1":-2}}',
        endingOffsets='{"zipped":{"0":150}}',
        maxBytesPerPartition="2000",
    )
    plan = build_plan(parse_options(opts))
    assert [(r.partition, r.start_offset, r.end_offset) for r in plan.ranges] == [
        (0, 17, 150), (1, 0, p1.end_offset),
    ]  # fmt: skip
    got = sorted(as_expected(r)[:2] for r in read_all(plan))
    wanted = [(0, r.offset) for r in p0.records if 17 <= r.offset < 150]
    assert got == wanted + [(1, r.offset) for r in p1.records]

    # Timestamps: the first offset (control records count) at or after each one.
    start_ts, end_ts = p0.stamps[40][1] + 1, p0.stamps[200][1]
    plan = build_plan(parse_options(bucket.options(
        "zipped", startingTimestamp=str(start_ts), endingTimestamp=str(end_ts), partitions="0",
    )))  # fmt: skip
    lo = _first_at_or_after(p0.stamps, start_ts, p0.end_offset)
    hi = _first_at_or_after(p0.stamps, end_ts, p0.end_offset)
    assert [(r.start_offset, r.end_offset) for r in plan.ranges] == [(lo, hi)]
    got = [as_expected(r)[1] for r in read_all(plan)]
    assert got == [r.offset for r in p0.records if lo <= r.offset < hi]

    # A starting timestamp after the last record: an error, or nothing with strategy latest.
    late = str(p0.stamps[-1][1] + 1)
    with pytest.raises(ConfigurationError, match="startingOffsetsByTimestampStrategy"):
        build_plan(parse_options(bucket.options("zipped", startingTimestamp=late)))
    plan = build_plan(parse_options(bucket.options(
        "zipped", startingOffsetsByTimestamp=f'{{"zipped":{{"0":{late}}}}}',
        startingOffsetsByTimestampStrategy="latest", endingTimestamp=late,
    )))  # fmt: skip
    assert plan.ranges[0].start_offset == plan.ranges[0].end_offset == p0.end_offset
    assert [s.partition for s in plan.splits] == [1] * len(plan.splits)


def test_plan_errors(bucket: Bucket) -> None:
    with pytest.raises(ConfigurationError, match="after the ending offset"):
        build_plan(parse_options(bucket.options("plain", startingOffsets="50", endingOffsets="10")))
    with pytest.raises(UnknownTopicOrPartitionError, match=r"\[7\]"):
        build_plan(parse_options(bucket.options("plain", partitions="0,7")))
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        build_plan(parse_options(bucket.options("nope")))
    # before: "unknown topic", not a word about the prefix that lacks its '/'
    with pytest.raises(UnknownTopicOrPartitionError, match="did you mean the key prefix 'tiered/'"):
        build_plan(parse_options(bucket.options("plain", keyPrefix="tiered")))


def test_catalog_plans_like_a_scan(bucket: Bucket, tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = ["catalog", "scan", "--store", bucket.store_url, "--key-prefix", "tiered/",
            "--key-pair", bucket.key_pairs[0], "--state-dir", str(state)]  # fmt: skip
    assert cli_main(args) == 0
    scanned = build_plan(parse_options(bucket.options("sealed")))
    cataloged = build_plan(parse_options(bucket.options("sealed", catalog=str(state))))
    assert cataloged.splits == scanned.splits and cataloged.splits
    with pytest.raises(ConfigurationError, match="catalog"):
        build_plan(parse_options(bucket.options("sealed", catalog=str(tmp_path / "none"))))


def test_headers_column_only_when_asked(bucket: Bucket) -> None:
    plan = build_plan(parse_options(bucket.options("plain", partitions="1")))
    batches = [b for s in plan.splits for b in read_split(s, plan.context)]
    assert batches and all("headers" not in b.schema.names for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("topic").unique().to_pylist() == ["plain"]
    assert table.column("partition").unique().to_pylist() == [1]
