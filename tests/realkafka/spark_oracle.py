"""Spark's own Kafka source (``spark-sql-kafka-0-10``) on the broker, as an oracle: one batch
read per topic and isolation level, and one ``Trigger.AvailableNow`` streaming query per topic,
their schema and rows recorded (``python -m tests.realkafka.spark_oracle BOOTSTRAP OUT TOPIC...``,
run by the generator in a process of its own). The same row shape serves the checks, which read
the bucket with ``format("tiered-kafka")``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.realkafka.report import b64, compact

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")


def session(packages: str | None = None) -> SparkSession:
    from pyspark.sql import SparkSession  # noqa: PLC0415 - the spark extra

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("real-kafka")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if packages:
        builder = builder.config("spark.jars.packages", packages)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """Spark rows in the oracle's shape, ordered by partition and offset; timestamps in
    microseconds since the epoch (Spark's precision), headers as [name, base64]."""
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    picked = df.select(
        *[c for c in COLUMNS if c != "timestamp"], F.unix_micros("timestamp").alias("timestamp")
    )
    out = []
    for r in picked.collect():
        out.append(
            compact(
                {
                    "topic": r["topic"],
                    "partition": r["partition"],
                    "offset": r["offset"],
                    "timestamp": r["timestamp"],
                    "timestampType": r["timestampType"],
                    "key": b64(r["key"]),
                    "value": b64(r["value"]),
                    "headers": [[h["key"], b64(h["value"])] for h in r["headers"] or []],
                }
            )
        )
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def schema_of(df: DataFrame) -> list[str]:
    return [f"{f.name}:{f.dataType.simpleString()}:{f.nullable}" for f in df.schema.fields]


def stream_rows(
    spark: SparkSession, reader: Any, checkpoint: Path
) -> tuple[list[str], list[dict[str, Any]]]:
    """One ``Trigger.AvailableNow`` query of ``reader`` (a ``readStream``) into memory."""
    df = reader.load()
    name = f"q{abs(hash(str(checkpoint)))}"
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination(300)
    if query.isActive:
        query.stop()
        raise TimeoutError("the AvailableNow query did not end in 300 s")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return schema_of(df), rows(spark.table(name))


def main() -> None:
    bootstrap, out, *topics = sys.argv[1:]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    spark = session(SPARK_KAFKA)
    try:
        for topic in topics:
            record: dict[str, Any] = {}
            for isolation in ("read_uncommitted", "read_committed"):
                df = (
                    spark.read.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .option("endingOffsets", "latest")
                    .option("includeHeaders", "true")
                    .option("kafka.isolation.level", isolation)
                    .load()
                )
                record[f"batch_{isolation}"] = {"schema": schema_of(df), "rows": rows(df)}
            reader = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("includeHeaders", "true")
            )
            schema, got = stream_rows(spark, reader, out_dir / f".checkpoint-{topic}")
            record["stream_read_uncommitted"] = {"schema": schema, "rows": got}
            (out_dir / f"{topic}.spark.json").write_text(json.dumps(record, sort_keys=True) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
