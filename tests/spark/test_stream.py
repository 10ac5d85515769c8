"""``spark.readStream.format("tiered-kafka")`` on local[2] with a real checkpoint folder.

A topic's broker folders are written by the independent encoders (:mod:`tests.spark.support`);
segments reach the bucket in steps through the ``tier`` command, as a broker with the plugin
would tier them: a query starts on a partial bucket, more segments are tiered while it runs,
it is stopped and restarted from its checkpoint, and its file sink (exactly once through the
checkpoint) must then hold every record exactly once, equal to what the encoders wrote, for
both isolation levels. Waiting is Spark's ``processAllAvailable()`` (returns when a trigger
finds nothing new), never a sleep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.extras import require_spark

require_spark()

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from gateway.spark.source import TieredKafkaDataSource
from tests.spark.stream_bucket import TOPIC, Tiered, make_tiered


@pytest.fixture
def tiered(tmp_path: Path) -> Tiered:
    return make_tiered(tmp_path)


@pytest.fixture(scope="module")
def tk(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark


def start(
    spark: SparkSession, tiered: Tiered, out: Path, *, available_now: bool = False, **extra: str
) -> StreamingQuery:
    reader = (
        spark.readStream.format("tiered-kafka")
        .option("store", tiered.bucket.as_uri())
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .options(**extra)
        .load()
        .selectExpr(
            "partition",
            "offset",
            "key",
            "value",
            "unix_millis(timestamp) AS ms",
            "timestampType",
            "headers",
            "leaderEpoch",
        )
    )
    writer = (
        reader.writeStream.format("parquet")
        .option("path", str(out / "sink"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="200 milliseconds")
    )
    return writer.start()


@contextlib.contextmanager
def running(query: StreamingQuery) -> Iterator[StreamingQuery]:
    try:
        yield query
    finally:
        query.stop()


def sink_rows(spark: SparkSession, out: Path) -> list[tuple[object, ...]]:
    rows = []
    for r in spark.read.parquet(str(out / "sink")).collect():
        headers = tuple((h["key"], h["value"]) for h in r["headers"] or ())
        rows.append((r["partition"], r["offset"], r["key"], r["value"], r["ms"],
                     r["timestampType"], r["leaderEpoch"], headers))  # fmt: skip
    return sorted(rows, key=lambda t: (t[0], t[1]))


def expected(tiered: Tiered, committed: bool, lo: dict[int, int] | None = None) -> list[object]:
    out = []
    for p, data in sorted(tiered.data.items()):
        for r in data.committed() if committed else data.records:
            if r.offset >= (lo or {}).get(p, 0):
                out.append((p, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch,
                            r.headers))  # fmt: skip
    return out


LIMIT = 100  # maxOffsetsPerTrigger


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_replay_then_keep_up_across_a_restart(
    tk: SparkSession, tiered: Tiered, tmp_path: Path, isolation: str
) -> None:
    committed = isolation == "read_committed"
    # ~110 records tiered before the query starts, ~530 in all: the limit splits every phase
    # into several micro-batches, with few enough of them that Spark's per-batch cost stays small
    options = {"isolation.level": isolation, "maxOffsetsPerTrigger": str(LIMIT)}
    tiered.tier(2, partitions=(0,))  # partition 1 has nothing in the remote tier yet
    with running(start(tk, tiered, tmp_path, **options)) as query:
        query.processAllAvailable()
        first = sink_rows(tk, tmp_path)
        assert first, "the segments tiered before the query started were read"
        assert {r[0] for r in first} == {0}
        tiered.tier(3)  # tiered under the running query; partition 1 read from its earliest
        query.processAllAvailable()
        second = sink_rows(tk, tmp_path)
        assert len(second) > len(first)
        batches = [p["numInputRows"] for p in query.recentProgress]
        assert max(batches) <= LIMIT and len([b for b in batches if b]) >= len(second) // LIMIT
    tiered.tier(99)  # the rest, while the query is stopped
    with running(start(tk, tiered, tmp_path, available_now=True, **options)) as query:
        query.awaitTermination()  # availableNow: stops once everything tiered is read
        assert query.exception() is None
    assert sink_rows(tk, tmp_path) == expected(tiered, committed)


def test_fail_on_data_loss_both_ways(tk: SparkSession, tiered: Tiered, tmp_path: Path) -> None:
    tiered.tier(99)
    options = {"maxOffsetsPerTrigger": "2"}
    with running(start(tk, tiered, tmp_path, **options)) as query:
        for _ in range(1500):  # until the first rows are written (a hang fails, not a race)
            if any(p["numInputRows"] for p in query.recentProgress):
                break
            query.awaitTermination(0.2)
        else:
            raise AssertionError(f"no rows read: {query.exception()}")
    read = sink_rows(tk, tmp_path)
    assert 0 < len(read) < len(expected(tiered, False))
    # Retention deletes partition 0's oldest segment, records the query has not read yet.
    remote_start = tiered.delete_first_segment(0)
    read_before = {p: max((r[1] for r in read if r[0] == p), default=-1) for p in (0, 1)}
    assert read_before[0] + 1 < remote_start
    query = start(tk, tiered, tmp_path, available_now=True)
    with running(query), pytest.raises(StreamingQueryException) as info:
        query.awaitTermination()
    assert "RemoteGapError" in str(info.value) and "holds offsets" in str(info.value)
    assert "failOnDataLoss" in str(info.value)
    assert sink_rows(tk, tmp_path) == read  # nothing more was written
    with running(start(
        tk, tiered, tmp_path, available_now=True, failOnDataLoss="false"
    )) as query:  # fmt: skip
        query.awaitTermination()
        assert query.exception() is None
    lost = {0: remote_start}
    got = sink_rows(tk, tmp_path)
    kept = [r for r in expected(tiered, False) if r[0] == 1 or r[1] <= read_before[0]]
    kept += [r for r in expected(tiered, False, lost) if r[0] == 0]
    assert got == sorted(kept, key=lambda t: (t[0], t[1]))


def test_an_ending_bound_is_refused(tk: SparkSession, tiered: Tiered, tmp_path: Path) -> None:
    tiered.tier(2)
    with pytest.raises(Exception, match="not valid in a streaming query"):
        start(tk, tiered, tmp_path, endingOffsets="latest").processAllAvailable()
