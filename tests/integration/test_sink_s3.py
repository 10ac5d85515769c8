"""The export's Arrow writer against a real S3 server (moto): the rename is a server-side copy,
credentials and endpoint come in the output URI, and a failed task leaves no object."""

from __future__ import annotations

from collections.abc import Iterator

import boto3

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gateway.errors import ConfigurationError, CorruptDataError
from gateway.spark.output import prepare_output
from gateway.spark.sink import OutputSpec, open_output, write_batches
from tests.spark.test_sink import SPLIT, batch


def output_uri(endpoint: str, bucket: str) -> str:
    host = endpoint.removeprefix("http://")
    return f"s3a://testing:testing@{bucket}/export?endpoint_override={host}&scheme=http"


def objects(endpoint: str, bucket: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    # Arrow may leave a directory marker ("a/b/") after deleting a temp object: readers skip it
    return sorted(o["Key"] for o in listed if not o["Key"].endswith("/"))


def test_writes_one_object_per_split(moto_endpoint: str, s3_bucket: str) -> None:
    out = OutputSpec(output_uri(moto_endpoint, s3_bucket), "job1")
    written = write_batches((batch(100 + 50 * i, 50) for i in range(4)), SPLIT, out)
    key = "export/topic=orders.v1/partition=3/part-00000000000000000100-0001-job1.snappy.parquet"
    assert objects(moto_endpoint, s3_bucket) == [key]
    assert written.path == f"{s3_bucket}/{key}" and written.records == 200
    fs, _ = open_output(out.uri)
    with fs.open_input_file(f"{s3_bucket}/{key}") as f:
        assert pq.read_table(f).column("offset").to_pylist() == list(range(100, 300))


def test_a_failed_task_leaves_no_object(moto_endpoint: str, s3_bucket: str) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield batch(100, 50)
        raise CorruptDataError("bad CRC")

    out = OutputSpec(output_uri(moto_endpoint, s3_bucket), "j", row_group_rows=10)
    with pytest.raises(CorruptDataError):
        write_batches(failing(), SPLIT, out)
    assert [k for k in objects(moto_endpoint, s3_bucket) if k.endswith(".parquet")] == []


def test_overwrite_never_empties_a_whole_bucket(moto_endpoint: str, s3_bucket: str) -> None:

    out = OutputSpec(output_uri(moto_endpoint, s3_bucket), "job1")
    write_batches(iter([batch(100, 5)]), SPLIT, out)
    fs, _ = open_output(out.uri)
    with pytest.raises(ConfigurationError, match="whole bucket"):
        prepare_output(fs, s3_bucket, "overwrite", f"s3://{s3_bucket}")
    assert len(objects(moto_endpoint, s3_bucket)) == 1
    assert prepare_output(fs, f"{s3_bucket}/export", "overwrite", "shown")
    assert objects(moto_endpoint, s3_bucket) == []
