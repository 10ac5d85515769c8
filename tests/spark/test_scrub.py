"""``tiered-gateway scrub`` end to end on a local[2] Spark session: a clean demo bucket exits
0 with an empty-but-for-info report; a bucket with five injected faults exits 1 and the report
table names each with its check and object key. Two Spark runs in this module; the finer
checks live in tests/unit/scrub (no Spark)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from pathlib import Path

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from gateway.cli import main
from gateway.demo import DemoBucket, write_demo_bucket
from gateway.kafka.batch import iter_batches
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import parse_manifest
from tests.unit.scrub.helpers import Bucket, copy_bucket


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    return write_demo_bucket(tmp_path_factory.mktemp("scrub-spark-demo"))


def scrub_args(bucket: Bucket, report: Path, *extra: str) -> list[str]:
    return [
        "scrub",
        "--store",
        bucket.url,
        "--key-prefix",
        bucket.prefix,
        "--key-pair",
        bucket.demo.key_pair_spec,
        "--report",
        str(report),
        "--upload-grace",
        "0",
        *extra,
    ]


def test_a_clean_bucket_exits_0(
    spark: SparkSession, demo: DemoBucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = copy_bucket(demo, tmp_path)
    report = tmp_path / "report"
    assert main(scrub_args(bucket, report)) == 0
    out = capsys.readouterr().out
    assert "scrub: 31 segments, 93 objects" in out
    assert "findings: 0 errors, 0 warnings, 1 info" in out
    table = pq.read_table(report).to_pylist()
    assert [(r["check"], r["severity"], r["topic"]) for r in table] == [
        ("duplicate", "info", "inventory")
    ]
    assert spark.read.parquet(str(report)).count() == 1
    assert main(scrub_args(bucket, report)) == 2  # the report path is taken: a usage error
    assert "already exists" in capsys.readouterr().err


def test_a_faulty_bucket_exits_1_and_the_report_names_each_fault(
    spark: SparkSession, demo: DemoBucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = copy_bucket(demo, tmp_path)
    # 1. a flipped byte in an encrypted chunk
    chunk_key = bucket.keys("payments", 1, Suffix.LOG)[0]
    manifest = parse_manifest(bucket.path(chunk_key).with_suffix(".rsm-manifest").read_bytes())
    bucket.flip(chunk_key, manifest.chunk_index.chunk(0).transformed_position + 100)
    # 2. a missing .indexes object
    indexes_key = bucket.keys("clicks.v2-raw", 2, Suffix.INDEXES)[1]
    bucket.path(indexes_key).unlink()
    # 3. an orphan .log
    source = parse_object_key(bucket.keys("orders", 1, Suffix.LOG)[0], bucket.prefix)
    orphan_key = dataclasses.replace(source, segment_id=uuid.uuid4()).key
    shutil.copy(bucket.path(source.key), bucket.path(orphan_key))
    # 4. an offset gap: a middle segment of audit-0 gone, all three objects
    logs = bucket.keys("audit", 0, Suffix.LOG)
    gone = parse_object_key(logs[1], bucket.prefix)
    for suffix in Suffix:
        bucket.path(gone.with_suffix(suffix).key).unlink()
    after = parse_object_key(logs[2], bucket.prefix).with_suffix(Suffix.MANIFEST).key
    # 5. a flipped partitionLeaderEpoch (outside the CRC) in a plain .log
    epoch_key = bucket.keys("inventory", 0, Suffix.LOG)[-1]
    batch = list(iter_batches(bucket.path(epoch_key).read_bytes()))[-1]
    bucket.flip(epoch_key, batch.position + 15)

    report = tmp_path / "report"
    assert main(scrub_args(bucket, report, "--json")) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["exit_code"] == 1 and summary["segments"] == 30
    assert summary["findings"]["error"] == 5
    assert summary["records"] > 0 and summary["log_bytes_decoded"] > 0
    rows = pq.read_table(report).to_pylist()
    errors = {(r["check"], r["object_key"]) for r in rows if r["severity"] == "error"}
    assert errors == {
        ("chunk", chunk_key),
        ("missing-object", indexes_key),
        ("orphan-object", orphan_key),
        ("gap", after),
        ("leader-epoch", epoch_key),
    }
