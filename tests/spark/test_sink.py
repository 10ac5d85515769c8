"""The export's Arrow writer without Spark: row groups, the layout, and no partial files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gateway.errors import ConfigurationError, CorruptDataError
from gateway.spark.columns import arrow_schema
from gateway.spark.plan import SegmentRef, Split
from gateway.spark.sink import OutputSpec, open_output, redact, remove_leftovers, write_batches

REF = SegmentRef("t/seg.log", 100, 199, 10_000, True, 0)
SPLIT = Split("orders.v1", 3, REF, 100, 200, part=1, parts=2)


def batch(first: int, rows: int) -> pa.RecordBatch:
    offsets = list(range(first, first + rows))
    columns = [
        pa.array([b"k%d" % o for o in offsets], pa.binary()),
        pa.array([b"v" * (o % 7) if o % 5 else None for o in offsets], pa.binary()),
        pa.array(["orders.v1"] * rows, pa.string()),
        pa.array([3] * rows, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array([1_700_000_000_000_000 + o for o in offsets], pa.timestamp("us", tz="UTC")),
        pa.array([0] * rows, pa.int32()),
        pa.array([5] * rows, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(False))


def test_one_file_per_split_and_row_groups_cut_after_the_bound(tmp_path: Path) -> None:
    out = OutputSpec(str(tmp_path), "job1", compression="zstd", row_group_rows=250)
    written = write_batches((batch(100 + 60 * i, 60) for i in range(10)), SPLIT, out)
    path = tmp_path / "topic=orders.v1" / "partition=3"
    path /= "part-00000000000000000100-0001-job1.zstd.parquet"
    assert written.path == str(path)
    assert written.records == 600
    assert written.bytes == path.stat().st_size
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [300, 300]
    assert meta.row_group(0).column(0).compression == "ZSTD"
    table = pq.read_table(path)
    assert "topic" not in table.column_names and "partition" not in table.column_names
    assert table.column("offset").to_pylist() == list(range(100, 700))
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_no_records_no_file(tmp_path: Path) -> None:
    written = write_batches(iter(()), SPLIT, OutputSpec(str(tmp_path), "j"))
    assert (written.records, written.bytes, written.path) == (0, 0, None)
    assert list(tmp_path.iterdir()) == []


def test_a_failing_read_leaves_no_file(tmp_path: Path) -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield batch(100, 50)
        raise CorruptDataError("t/seg.log: bad CRC")

    out = OutputSpec(str(tmp_path), "j", row_group_rows=10)  # a row group was flushed
    with pytest.raises(CorruptDataError, match="bad CRC"):
        write_batches(failing(), SPLIT, out)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_leftovers_of_this_jobs_killed_tasks_are_removed(tmp_path: Path) -> None:
    folder = tmp_path / "topic=t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / ".part-00000000000000000000-0000-j1.parquet.tmp-abc").write_bytes(b"x")
    (folder / ".part-00000000000000000000-0000-j2.parquet.tmp-def").write_bytes(b"other job")
    (folder / "part-00000000000000000000-0000-j1.parquet").write_bytes(b"keep")
    (folder / ".hidden").write_bytes(b"not ours")
    fs, root = open_output(str(tmp_path))
    assert remove_leftovers(fs, [f"{root}/topic=t/partition=0", f"{root}/nowhere"], "j1") == 1
    assert sorted(p.name for p in folder.iterdir()) == [
        ".hidden",
        ".part-00000000000000000000-0000-j2.parquet.tmp-def",
        "part-00000000000000000000-0000-j1.parquet",
    ]


def test_credentials_are_redacted_from_what_is_shown() -> None:
    assert redact("s3a://AKIA:s3cr3t@bucket/x?endpoint_override=h:9000&scheme=http") == (
        "s3a://***@bucket/x?endpoint_override=h:9000&scheme=http"
    )
    assert redact("s3://bucket/x?access_key=AKIA&secret_key=s3cr3t") == (
        "s3://bucket/x?access_key=***&secret_key=***"
    )
    assert redact("/data/out") == "/data/out"
    assert redact("s3://bucket/out") == "s3://bucket/out"


def test_output_uris(tmp_path: Path) -> None:
    fs, path = open_output(f"{tmp_path}/x/")
    assert fs.type_name == "local" and path == f"{tmp_path}/x"
    fs, path = open_output((tmp_path / "y").as_uri())
    assert fs.type_name == "local" and path == f"{tmp_path}/y"
    with pytest.raises(ConfigurationError, match="--writer spark"):
        open_output("wasb://container@account/x")
