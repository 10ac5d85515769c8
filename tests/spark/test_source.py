"""``spark.read.format("tiered-kafka")`` on a local[2] session against the written records.

Each Spark action costs seconds, so one bucket serves the module and each test makes as few
DataFrames as it can: every topic (every chunk-transform combination) is read in one union per
isolation level, with segments split into several tasks.
"""

from __future__ import annotations

from functools import reduce
from pathlib import Path

import pytest

from tests.fixtures.extras import require_spark

require_spark()

from pyspark.errors import AnalysisException, PythonException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as f
from pyspark.sql.pandas.types import to_arrow_schema

from gateway.spark.columns import arrow_schema
from gateway.spark.source import TieredKafkaDataSource, spark_schema
from tests.spark.support import Bucket, Expected, write_bucket

COLUMNS = [
    "topic", "partition", "offset", "key", "value", "millis", "timestampType", "leaderEpoch",
    "headers",
]  # fmt: skip


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def tk(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark


def load(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    df = spark.read.format("tiered-kafka").options(**options).load()
    if "headers" not in df.columns:
        df = df.withColumn("headers", f.lit(None))
    return df.withColumn("millis", f.expr("unix_millis(timestamp)")).select(*COLUMNS)


def rows(df: DataFrame) -> list[tuple[object, ...]]:
    out = []
    for r in df.collect():
        headers = tuple((h["key"], h["value"]) for h in r["headers"] or ())
        out.append((*tuple(r)[:-1], headers))
    return sorted(out, key=lambda t: (str(t[0]), t[1], t[2]))


def expected(
    topic: str, p: int, records: list[Expected], *, headers: bool = True
) -> list[tuple[object, ...]]:
    return [
        (topic, p, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch,
         r.headers if headers else ())
        for r in records
    ]  # fmt: skip


def test_schema_is_the_kafka_sources_plus_leader_epoch() -> None:
    names = [field.name for field in spark_schema(True).fields]
    assert names == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
        "leaderEpoch",
    ]  # fmt: skip
    assert spark_schema(True).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>,"
        "leaderEpoch:int>"
    )
    for headers in (True, False):  # Spark refuses batches whose Arrow schema differs
        assert to_arrow_schema(spark_schema(headers), timezone="UTC").equals(arrow_schema(headers))


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_every_transform_combination(tk: SparkSession, bucket: Bucket, isolation: str) -> None:
    frames = [
        load(
            tk,
            bucket.options(
                topic,
                includeHeaders="true",
                maxBytesPerPartition="6000",
                **{"kafka.isolation.level" if topic == "sealed" else "isolation.level": isolation},
            ),
        )
        for topic in bucket.topics
    ]
    union = reduce(DataFrame.unionByName, frames)
    segments = sum(p.segments for parts in bucket.topics.values() for p in parts.values())
    assert union.rdd.getNumPartitions() > segments  # segments split into several tasks
    wanted = []
    for topic, parts in sorted(bucket.topics.items()):
        for p, data in sorted(parts.items()):
            records = data.committed() if isolation == "read_committed" else data.records
            wanted += expected(topic, p, records)
    assert rows(union) == wanted


def test_offset_and_timestamp_bounds(tk: SparkSession, bucket: Bucket) -> None:
    sealed = bucket.topics["sealed"]
    s0, s1 = sealed[0], sealed[1]
    by_offsets = load(tk, bucket.options(
        "sealed", startingOffsets='{"sealed":{"0":23,"1":-2}}',
        endingOffsets='{"sealed":{"0":-1,"1":100}}', maxBytesPerPartition="3000",
    ))  # fmt: skip
    start_ts = s1.stamps[30][1]
    end_ts = s1.stamps[-40][1] + 1
    by_time = load(tk, bucket.options(
        "sealed", startingTimestamp=str(start_ts), endingTimestamp=str(end_ts),
        **{"isolation.level": "read_committed"},
    ))  # fmt: skip
    got = rows(
        by_offsets.withColumn("topic", f.lit("by-offsets")).unionByName(
            by_time.withColumn("topic", f.lit("by-time"))
        )
    )
    wanted = expected("by-offsets", 0, [r for r in s0.records if r.offset >= 23], headers=False)
    wanted += expected("by-offsets", 1, [r for r in s1.records if r.offset < 100], headers=False)
    for p, data in sorted(sealed.items()):
        lo = next(o for o, t in data.stamps if t >= start_ts)
        hi = next((o for o, t in data.stamps if t >= end_ts), data.end_offset)
        records = [r for r in data.committed() if lo <= r.offset < hi]
        wanted += expected("by-time", p, records, headers=False)
    assert got == sorted(wanted, key=lambda t: (str(t[0]), t[1], t[2]))


def test_bad_options_fail_the_load_naming_the_option(tk: SparkSession, bucket: Bucket) -> None:
    with pytest.raises((AnalysisException, PythonException, CapturedException)) as info:
        tk.read.format("tiered-kafka").options(
            **bucket.options("plain", **{"isolation.level": "dirty"})
        ).load()
    assert "isolation.level" in str(info.value)
    with pytest.raises((AnalysisException, PythonException, CapturedException)) as info:
        df = tk.read.format("tiered-kafka").schema("a int").options(**bucket.options("plain"))
        df.load().collect()  # a given schema skips schema(): planning refuses it
    assert "fixed schema" in str(info.value)


def test_missing_key_pair_is_a_typed_error(tk: SparkSession, bucket: Bucket) -> None:
    opts = bucket.options("sealed", partitions="0")
    opts["keyPairs"] = f"k1={Path(bucket.root, 'absent.pem')}"
    with pytest.raises(Exception, match=r"absent\.pem"):
        load(tk, opts).count()
