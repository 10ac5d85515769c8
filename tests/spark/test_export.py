"""``tiered-gateway export``: Parquet by topic and partition, equal to the written records."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from gateway.cli import main as cli_main
from gateway.commands.export import bound_options
from gateway.errors import ConfigurationError
from tests.spark.support import PREFIX, Bucket, write_bucket

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def millis(ts: datetime) -> int:
    """Spark writes UTC instants; Parquet readers may give them without a zone."""
    return (ts.replace(tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("export"))


def test_bound_options() -> None:
    assert bound_options("--from", "earliest", ending=False) == {"startingOffsets": "earliest"}
    assert bound_options("--to", "120", ending=True) == {"endingOffsets": "120"}
    assert bound_options("--from", '{"t":{"0":5}}', ending=False) == {
        "startingOffsets": '{"t":{"0":5}}'
    }
    assert bound_options("--from", "@1700000000123", ending=False) == {
        "startingTimestamp": "1700000000123"
    }
    assert bound_options("--to", "2023-11-14T22:13:20Z", ending=True) == {
        "endingTimestamp": "1700000000000"
    }
    assert bound_options("--to", "2023-11-14T22:13:20", ending=True) == {  # no zone: UTC
        "endingTimestamp": "1700000000000"
    }
    with pytest.raises(ConfigurationError, match="--from"):
        bound_options("--from", "yesterday", ending=False)


def test_cli_imports_without_pyspark() -> None:
    code = "import sys, gateway.cli; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_export_writes_parquet_by_partition(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bucket.topics["zipped"]
    start_ts = data[1].stamps[20][1]
    out = tmp_path / "out"
    args = [
        "export", "--store", bucket.store_url, "--key-prefix", PREFIX,
        "--key-pair", bucket.key_pairs[0], "--topic", "zipped", "--from", f"@{start_ts}",
        "--to", "latest", "--isolation-level", "read_committed", "--include-headers",
        "--output", str(out), "--master", "local[2]", "--max-bytes-per-partition", "4000",
    ]  # fmt: skip
    assert cli_main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    wanted: dict[int, list[tuple[object, ...]]] = {}
    for p, part in data.items():
        lo = next(o for o, t in part.stamps if t >= start_ts)
        wanted[p] = [
            (r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch, r.headers)
            for r in part.committed()
            if r.offset >= lo
        ]
    assert summary["records"] == sum(len(w) for w in wanted.values())
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["topic=zipped"]
    for p, rows in wanted.items():
        table = pq.read_table(out / "topic=zipped" / f"partition={p}")
        got = sorted(
            (r["offset"], r["key"], r["value"], millis(r["timestamp"]), r["timestampType"],
             r["leaderEpoch"], tuple((h["key"], h["value"]) for h in r["headers"]))
            for r in table.to_pylist()
        )  # fmt: skip
        assert got == rows, p
    # The output exists now: the default mode refuses to overwrite it.
    assert cli_main(args) == 2
