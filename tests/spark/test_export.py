"""``tiered-gateway export``: Parquet by topic and partition, equal to the written records."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.fixtures.extras import require_spark

require_spark()

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


def export_args(bucket: Bucket, topic: str, out: Path, *extra: str) -> list[str]:
    return [
        "export", "--store", bucket.store_url, "--key-prefix", PREFIX,
        "--key-pair", bucket.key_pairs[0], "--topic", topic, "--output", str(out),
        "--master", "local[2]", "--max-bytes-per-partition", "3000", "--quiet", *extra,
    ]  # fmt: skip


def spark_rows(spark: SparkSession, path: Path) -> list[tuple[object, ...]]:
    """The table as Spark reads it back (partition columns from the directory names)."""
    return sorted(
        (r.topic, r.partition, r.offset, r.key, r.value, millis(r.timestamp), r.timestampType,
         r.leaderEpoch, tuple((h.key, h.value) for h in r.headers))
        for r in spark.read.parquet(str(path)).collect()
    )  # fmt: skip


@pytest.mark.parametrize("topic", ["sealed", "plain"])
def test_both_writers_give_the_same_table(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, topic: str
) -> None:
    outs = {}
    for writer in ("arrow", "spark"):
        outs[writer] = tmp_path / writer
        args = export_args(bucket, topic, outs[writer], "--writer", writer, "--include-headers")
        assert cli_main(args) == 0
    wanted = sorted(
        (topic, p, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch, r.headers)
        for p, part in bucket.topics[topic].items()
        for r in part.records
    )
    assert spark_rows(spark, outs["arrow"]) == wanted
    assert spark_rows(spark, outs["spark"]) == wanted
    arrow_files = sorted(outs["arrow"].rglob("*"))
    assert outs["arrow"] / "_SUCCESS" in arrow_files
    assert not [f for f in arrow_files if f.name.startswith(".")], "temp files left behind"
    assert all(f.name.endswith(".snappy.parquet") for f in arrow_files if f.suffix == ".parquet")


def test_modes(bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    count = sum(len(part.records) for part in bucket.topics["plain"].values())

    def run(*extra: str) -> dict[str, object]:
        assert cli_main(export_args(bucket, "plain", out, *extra)) == 0
        summary: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        return summary

    def rows() -> int:
        return pq.ParquetDataset(out).read(columns=["offset"]).num_rows

    first = run("--compression", "zstd")
    assert first["records"] == count == rows()
    assert first["files"] == len(list(out.rglob("*.zstd.parquet")))
    # ignore: an existing output is left as it is
    assert run("--mode", "ignore")["skipped"] is True
    assert rows() == count
    # overwrite: a stray file from before is gone, the records are written once
    stray = out / "topic=plain" / "partition=9"
    stray.mkdir()
    (stray / "part-old.parquet").write_bytes(b"stale")
    assert run("--mode", "overwrite")["records"] == count
    assert not stray.exists()
    assert rows() == count
    # append from offset 10 of every partition: new files, so those records twice
    again = run("--mode", "append", "--from", "10")
    assert again["records"] == sum(
        1 for part in bucket.topics["plain"].values() for r in part.records if r.offset >= 10
    )
    assert rows() == count + int(str(again["records"]))


def test_a_failed_task_exits_1_without_success_or_temp_files(
    bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = tmp_path / "bucket"
    shutil.copytree(bucket.root / "bucket", damaged)
    # partition 1 of plain: no chunk transform and no displaced upload (every segment is read)
    log = sorted(damaged.glob("tiered/plain-*/1/*.log"), key=lambda p: p.stat().st_size)[-1]
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x5A
    log.write_bytes(bytes(data))
    out = tmp_path / "out"
    args = export_args(bucket, "plain", out)
    args[args.index("--store") + 1] = damaged.as_uri()
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert "export of plain failed" in err and "CrcMismatchError" in err, err
    assert not out.exists()  # the folder it created is gone: nothing half-written to trip on
    # the retry, once the bucket is right, meets the output as it was (absent) and succeeds
    assert cli_main(export_args(bucket, "plain", out)) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    # appending to an existing output: a failed job removes its own files, keeps the others'
    assert cli_main([*args, "--mode", "append"]) == 1
    after = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert after == before, (set(after) - set(before), set(before) - set(after))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "json", "--compression", "zstd"], "json takes"),
        (["--format", "orc", "--writer", "arrow"], "parquet only"),
    ],
)
def test_bad_writer_options_exit_2_before_any_job(
    bucket: Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    assert cli_main(export_args(bucket, "plain", tmp_path / "out", *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
