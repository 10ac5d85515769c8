"""The spark-sql-kafka options jobs rely on, on a local[2] session: several topics in
``subscribe``, ``subscribePattern``, ``assign`` over topics, ``minPartitions``, and the rule for
Kafka options (connection-only ones ignored, any other named in the error)."""

from __future__ import annotations

import pytest

from tests.fixtures.extras import require_spark

require_spark()

from pyspark.errors import AnalysisException, PythonException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from gateway.spark.source import TieredKafkaDataSource
from tests.spark.support import PREFIX, Bucket, write_bucket
from tests.spark.test_source import expected, load, rows

SPARK_ERRORS = (AnalysisException, PythonException, CapturedException)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("dropin"))


@pytest.fixture(scope="module")
def tk(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark


def base(bucket: Bucket, **extra: str) -> dict[str, str]:
    return {
        "store": bucket.store_url,
        "keyPrefix": PREFIX,
        "keyPairs": ",".join(bucket.key_pairs),
        **extra,
    }


def wanted(
    bucket: Bucket, topics: list[str], *, committed: bool = False, lo: int = 0
) -> list[tuple[object, ...]]:
    out = []
    for topic in sorted(topics):
        for p, data in sorted(bucket.topics[topic].items()):
            records = data.committed() if committed else data.records
            out += expected(topic, p, [r for r in records if r.offset >= lo])
    return out


def test_several_topics_in_subscribe(tk: SparkSession, bucket: Bucket) -> None:
    df = load(tk, base(
        bucket, subscribe="zipped, plain", includeHeaders="true",
        **{"kafka.isolation.level": "read_committed"},
    ))  # fmt: skip
    assert rows(df) == wanted(bucket, ["plain", "zipped"], committed=True)


def test_subscribe_pattern_matches_whole_names(tk: SparkSession, bucket: Bucket) -> None:
    # "zipped.*" takes zipped and zipped-sealed; "ealed" alone matches no whole name.
    df = load(tk, base(bucket, subscribePattern="zipped.*", includeHeaders="true"))
    assert rows(df) == wanted(bucket, ["zipped", "zipped-sealed"])
    with pytest.raises(SPARK_ERRORS) as info:
        load(tk, base(bucket, subscribePattern="ealed")).collect()
    assert "matches no topic" in str(info.value) and "'sealed'" in str(info.value)


def test_assign_over_topics_with_per_topic_offsets(tk: SparkSession, bucket: Bucket) -> None:
    df = load(tk, base(
        bucket, assign='{"plain":[1],"sealed":[0]}', includeHeaders="true",
        startingOffsets='{"plain":{"1":40},"sealed":{"0":-2}}',
    ))  # fmt: skip
    plain = bucket.topics["plain"][1].records
    sealed = bucket.topics["sealed"][0].records
    assert rows(df) == [
        *expected("plain", 1, [r for r in plain if r.offset >= 40]),
        *expected("sealed", 0, sealed),
    ]
    with pytest.raises(SPARK_ERRORS) as info:  # offsets of a topic the read does not take
        load(tk, base(bucket, subscribe="plain", startingOffsets='{"zipped":{"0":1}}')).collect()
    assert "zipped" in str(info.value)


def test_min_partitions_splits_to_at_least_n_tasks(tk: SparkSession, bucket: Bucket) -> None:
    opts = base(bucket, subscribe="plain,sealed", includeHeaders="true")
    few = load(tk, opts).rdd.getNumPartitions()
    segments = sum(d.segments for t in ("plain", "sealed") for d in bucket.topics[t].values())
    assert few <= segments + 1  # one split per segment (plain has one displaced upload)
    many = load(tk, {**opts, "minPartitions": str(3 * segments)})
    assert many.rdd.getNumPartitions() >= 3 * segments
    assert rows(many) == wanted(bucket, ["plain", "sealed"])


def test_kafka_options_connection_only_ignored_others_named(
    tk: SparkSession, bucket: Bucket
) -> None:
    connection = {
        "kafka.bootstrap.servers": "broker:9092",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.jaas.config": "secret",
        "groupIdPrefix": "x",
    }
    df = load(tk, base(bucket, topic="zipped-sealed", includeHeaders="true", **connection))
    assert rows(df) == wanted(bucket, ["zipped-sealed"])
    for option in ("kafka.max.poll.records", "kafka.auto.offset.reset"):
        with pytest.raises(SPARK_ERRORS) as info:
            load(tk, base(bucket, topic="plain", **{option: "1"})).collect()
        assert option in str(info.value) and "not supported" in str(info.value)
