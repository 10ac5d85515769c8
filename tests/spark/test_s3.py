"""The Spark parts against a real S3 server (moto): executors read the bucket with the
blocking S3 store, and export's Arrow writer writes to S3 from the tasks."""

from __future__ import annotations

from pathlib import Path

import boto3

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from gateway.cli import main as cli_main
from gateway.spark.sink import open_output
from gateway.spark.source import register
from tests.spark.support import PREFIX, TOPICS, Bucket, write_bucket

TOPIC = "zipped-sealed"  # compressed and encrypted chunks: every transform on the S3 path


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    specs = tuple(spec for spec in TOPICS if spec.name == TOPIC)
    return write_bucket(tmp_path_factory.mktemp("s3"), specs)


def upload(bucket: Bucket, endpoint: str, name: str) -> None:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    root = bucket.root / "bucket"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        client.put_object(
            Bucket=name, Key=path.relative_to(root).as_posix(), Body=path.read_bytes()
        )


def test_read_and_export_through_s3(
    spark: SparkSession, bucket: Bucket, moto_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    upload(bucket, moto_endpoint, s3_bucket)
    register(spark)
    options = bucket.options(TOPIC, **{"s3.endpointUrl": moto_endpoint, "s3.pathStyle": "true"})
    options["store"] = f"s3://{s3_bucket}"
    options["isolation.level"] = "read_committed"
    df = spark.read.format("tiered-kafka").options(**options).load()
    got = sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())
    wanted = sorted(
        (p, r.offset, r.key, r.value)
        for p, part in bucket.topics[TOPIC].items()
        for r in part.committed()
    )
    assert got == wanted

    host = moto_endpoint.removeprefix("http://")
    out = f"s3a://{s3_bucket}/export?endpoint_override={host}&scheme=http"
    args = [
        "export", "--store", f"s3://{s3_bucket}", "--s3-endpoint-url", moto_endpoint,
        "--s3-path-style", "--key-prefix", PREFIX, "--key-pair", bucket.key_pairs[0],
        "--topic", TOPIC, "--output", out, "--quiet",
    ]  # fmt: skip
    assert cli_main(args) == 0
    fs, root = open_output(out)
    assert fs.get_file_info(f"{root}/_SUCCESS").size == 0
    table = pq.ParquetDataset(f"{root}/topic={TOPIC}", filesystem=fs).read()
    exported = sorted(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    every = sorted(
        (p, r.offset, r.key, r.value)
        for p, part in bucket.topics[TOPIC].items()
        for r in part.records
    )
    assert exported == every


def test_a_stream_over_s3_picks_up_segments_uploaded_while_it_runs(
    spark: SparkSession, bucket: Bucket, moto_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    """The streaming query's incremental scan (its own event loop and S3 client) against a real
    S3 server: half the objects first (whole segments: a manifest is uploaded last), the rest
    while the query runs."""
    register(spark)
    root = bucket.root / "bucket"
    manifests = sorted(root.rglob("*.rsm-manifest"), key=lambda m: m.name)
    first = {m.name.removesuffix(".rsm-manifest") for m in manifests[: len(manifests) // 2]}
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")

    def put(early: bool) -> None:
        files = [p for p in root.rglob("*") if p.is_file()]
        # A partition's segments in offset order (the names start with the zero-padded base
        # offset), each manifest after every data object, as a broker uploads them: a later
        # segment's manifest first would be a hole the scan rightly refuses.
        for path in sorted(files, key=lambda p: (p.suffix == ".rsm-manifest", p.name)):
            if (path.name.split(".", 1)[0] in first) == early:
                key = path.relative_to(root).as_posix()
                client.put_object(Bucket=s3_bucket, Key=key, Body=path.read_bytes())

    put(early=True)
    options = bucket.options(TOPIC, **{"s3.endpointUrl": moto_endpoint, "s3.pathStyle": "true"})
    options["store"] = f"s3://{s3_bucket}"
    query = (
        spark.readStream.format("tiered-kafka").options(**options).load()
        .selectExpr("partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )  # fmt: skip
    try:
        query.processAllAvailable()
        before = spark.read.parquet(str(tmp_path / "sink")).count()
        put(early=False)
        query.processAllAvailable()
    finally:
        query.stop()
    got = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "sink")).collect())
    every = sorted(
        (p, r.offset, r.key, r.value)
        for p, part in bucket.topics[TOPIC].items()
        for r in part.records
    )
    assert 0 < before < len(every)
    assert got == every
