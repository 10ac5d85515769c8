"""``export --format iceberg``: the table equals the written records, re-runs append only what
is new, a failed run commits nothing and leaves no file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyspark.sql import SparkSession

from gateway.cli import main as cli_main
from gateway.errors import ConfigurationError, CorruptDataError
from gateway.spark import iceberg as ice
from gateway.spark.columns import arrow_schema
from gateway.spark.plan import SegmentRef, Split
from gateway.spark.sink import US_PER_DAY, OutputSpec, write_batches_by_day
from tests.spark.support import PREFIX, TOPICS, Bucket, write_bucket

TOPIC = "plain"
HELD_BACK = 2  # the newest segments of each partition, tiered later


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("iceberg"), TOPICS[:1])


def segment_objects(store: Path) -> dict[Path, list[Path]]:
    """Each partition folder's objects, grouped by segment (start offset and id), in order."""
    groups: dict[Path, dict[str, list[Path]]] = {}
    for obj in sorted(store.glob(f"{PREFIX}{TOPIC}-*/*/*")):
        groups.setdefault(obj.parent, {}).setdefault(obj.name.split(".")[0], []).append(obj)
    return {folder: [f for _, fs in sorted(segs.items()) for f in fs] for folder, segs in
            groups.items()}  # fmt: skip


def partial_bucket(bucket: Bucket, root: Path) -> tuple[Path, list[Path]]:
    """A copy of the bucket without the objects of the last ``HELD_BACK`` segments of each
    partition; returns it and the relative paths held back (what ``tier_rest`` adds)."""
    store = root / "bucket"
    shutil.copytree(bucket.root / "bucket", store)
    held: list[Path] = []
    for folder in {obj.parent for obj in store.glob(f"{PREFIX}{TOPIC}-*/*/*")}:
        starts = sorted({obj.name.split("-")[0] for obj in folder.iterdir()})
        for obj in sorted(folder.iterdir()):
            if obj.name.split("-")[0] in starts[-HELD_BACK:]:
                held.append(obj.relative_to(store))
                obj.unlink()
    assert held
    return store, held


def tier_rest(bucket: Bucket, store: Path, held: list[Path]) -> None:
    """Upload the held-back segments' objects, as the broker's tiering does (manifest last)."""
    for rel in sorted(held, key=lambda p: p.suffix == ".rsm-manifest"):
        shutil.copy2(bucket.root / "bucket" / rel, store / rel)


def iceberg_args(bucket: Bucket, store: Path, warehouse: Path, *extra: str) -> list[str]:
    return [
        "export", "--store", store.as_uri(), "--key-prefix", PREFIX,
        "--key-pair", bucket.key_pairs[0], "--topic", TOPIC, "--format", "iceberg",
        "--warehouse", str(warehouse), "--master", "local[2]",
        "--max-bytes-per-partition", "3000", "--quiet", *extra,
    ]  # fmt: skip


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert cli_main(args) == 0, capsys.readouterr().err
    summary: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return summary


def table_of(warehouse: Path) -> ice.Table:
    catalog = ice.open_catalog(None, str(warehouse))
    table = ice.load_table(catalog, ("kafka", TOPIC))
    assert table is not None
    return table


def table_rows(table: ice.Table) -> list[tuple[object, ...]]:
    """(partition, offset, key, value, ts ms, type, epoch, headers) of every row, sorted."""
    rows = table.scan().to_arrow().to_pylist()
    return sorted(
        (r["partition"], r["offset"], r["key"], r["value"], (r["timestamp"] - EPOCH) // _MS,
         r["timestampType"], r["leaderEpoch"],
         tuple((h["key"], h["value"]) for h in r.get("headers") or ()))
        for r in rows
    )  # fmt: skip


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def expected(
    bucket: Bucket, *, below: dict[int, int] | None = None, headers: bool = False
) -> list[tuple[object, ...]]:
    """The generator's records (read_uncommitted: aborted ones too), below per-partition
    offsets when given (headers empty unless ``headers``: the table has none)."""
    return sorted(
        (p, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch,
         r.headers if headers else ())
        for p, part in bucket.topics[TOPIC].items()
        for r in part.records
        if below is None or r.offset < below[p]
    )  # fmt: skip


def data_files_on_disk(table: ice.Table) -> set[str]:
    root = Path(ice.data_location(table).removeprefix("file://"))
    return {f"file://{p}" for p in root.rglob("*") if p.is_file()}


def table_files(table: ice.Table) -> set[str]:
    return {task.file.file_path for task in table.scan().plan_files()}


def test_the_table_equals_the_records_with_the_documented_schema_and_spec(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = bucket.root / "bucket"
    summary = run(iceberg_args(bucket, store, tmp_path / "wh", "--include-headers"), capsys)
    table = table_of(tmp_path / "wh")
    wanted = expected(bucket, headers=True)
    assert summary["records"] == len(wanted)
    snapshot = table.current_snapshot()
    assert snapshot is not None and summary["snapshot_id"] == snapshot.snapshot_id
    assert table_rows(table) == wanted
    # the schema and partition spec of docs/iceberg.md
    assert [(f.field_id, f.name, str(f.field_type)) for f in table.schema().fields] == [
        (1, "key", "binary"), (2, "value", "binary"), (3, "topic", "string"),
        (4, "partition", "int"), (5, "offset", "long"), (6, "timestamp", "timestamptz"),
        (7, "timestampType", "int"),
        (8, "headers", "list<struct<11: key: optional string, 12: value: optional binary>>"),
        (9, "leaderEpoch", "int"),
    ]  # fmt: skip
    spec = [(table.schema().find_column_name(f.source_id), str(f.transform), f.name)
            for f in table.spec().fields]  # fmt: skip
    assert spec == [("partition", "identity", "partition"), ("timestamp", "day", "timestamp_day")]
    # every file in one (partition, day) partition, the files exactly the table's
    tasks = list(table.scan().plan_files())
    assert len(tasks) == summary["files"]
    for task in tasks:
        part = pq.read_table(task.file.file_path.removeprefix("file://"))
        days = {ts // US_PER_DAY for ts in part.column("timestamp").cast(pa.int64()).to_pylist()}
        assert (task.file.partition[0], task.file.partition[1]) == (
            *set(part.column("partition").to_pylist()),
            *days,
        )
    assert data_files_on_disk(table) == table_files(table)
    props = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    ends = {p: d.end_offset for p, d in bucket.topics[TOPIC].items()}
    assert json.loads(props[ice.RANGES_KEY]) == {TOPIC: {str(p): [[0, e]] for p, e in ends.items()}}
    assert json.loads(props[ice.COMMITTED_KEY]) == json.loads(props[ice.RANGES_KEY])
    assert json.loads(props[ice.TOPICS_KEY])[TOPIC]["isolation"] == "read_uncommitted"


def test_a_rerun_appends_only_the_newly_tiered_offsets(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, held = partial_bucket(bucket, tmp_path)
    warehouse = tmp_path / "wh"
    args = iceberg_args(bucket, store, warehouse)
    first = run(args, capsys)
    table = table_of(warehouse)
    ends = {int(p): rs[0][1] for p, rs in first["ranges"][TOPIC].items()}  # type: ignore[index]
    assert all(ends[p] < d.end_offset for p, d in bucket.topics[TOPIC].items())
    assert table_rows(table) == expected(bucket, below=ends)
    before = len(table_rows(table))

    # nothing tiered since: nothing committed, exit 0
    assert cli_main(args) == 0
    out = capsys.readouterr()
    assert "nothing new" in out.err
    assert json.loads(out.out.strip().splitlines()[-1])["committed"] is False
    assert table_of(warehouse).current_snapshot() == table.current_snapshot()

    tier_rest(bucket, store, held)
    second = run(args, capsys)
    table = table_of(warehouse)
    assert second["ranges"] == {
        TOPIC: {str(p): [[ends[p], d.end_offset]] for p, d in bucket.topics[TOPIC].items()}
    }
    assert second["records"] == len(expected(bucket)) - before
    assert table_rows(table) == expected(bucket)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.parent_snapshot_id == first["snapshot_id"]
    assert snapshot.summary["added-records"] == str(second["records"])  # type: ignore[index]
    assert data_files_on_disk(table) == table_files(table)


def test_missing_offsets_before_and_after_a_first_run_are_both_filled(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "wh"
    store = bucket.root / "bucket"
    first = run(iceberg_args(bucket, store, warehouse, "--from", "20", "--to", "60"), capsys)
    assert first["ranges"] == {TOPIC: {"0": [[20, 60]], "1": [[20, 60]]}}
    second = run(iceberg_args(bucket, store, warehouse), capsys)
    ends = {p: d.end_offset for p, d in bucket.topics[TOPIC].items()}
    assert second["ranges"] == {TOPIC: {str(p): [[0, 20], [60, e]] for p, e in ends.items()}}
    table = table_of(warehouse)
    assert table_rows(table) == expected(bucket)
    assert ice.committed(table).ranges == {TOPIC: {p: [(0, e)] for p, e in ends.items()}}


def test_a_failed_run_commits_nothing_and_leaves_no_file(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, held = partial_bucket(bucket, tmp_path)
    warehouse = tmp_path / "wh"
    args = iceberg_args(bucket, store, warehouse)
    first = run(args, capsys)
    tier_rest(bucket, store, held)
    # partition 1: no displaced upload, so its newest segment is read; corrupt it
    newest = max(store.glob(f"{PREFIX}{TOPIC}-*/1/*.log"))
    good = newest.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x5A
    newest.write_bytes(bytes(data))
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert "CrcMismatchError" in err, err
    table = table_of(warehouse)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == first["snapshot_id"]
    assert data_files_on_disk(table) == table_files(table)  # the other tasks' files are gone
    # repaired, the retry commits exactly what was missing
    newest.write_bytes(good)
    run(args, capsys)
    assert table_rows(table_of(warehouse)) == expected(bucket)


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        (["--include-headers"], [], "without headers"),
        ([], ["--isolation-level", "read_committed"], "--isolation-level read_uncommitted"),
        ([], ["--output", "x"], "no --output"),
    ],
)
def test_a_rerun_that_does_not_match_the_table_exits_2(
    spark: SparkSession,
    bucket: Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    first: list[str],
    then: list[str],
    message: str,
) -> None:
    store = bucket.root / "bucket"
    run(iceberg_args(bucket, store, tmp_path / "wh", "--to", "10", *first), capsys)
    assert cli_main(iceberg_args(bucket, store, tmp_path / "wh", *then)) == 2
    assert message in capsys.readouterr().err


def test_one_file_per_day_each_in_its_own_partition(tmp_path: Path) -> None:
    """The sink's per-day files: add_files infers each one's partition from its stats."""
    ref = SegmentRef("t/seg.log", 0, 99, 10_000, True, 0)
    split = Split(TOPIC, 3, ref, 0, 100)
    day = US_PER_DAY
    stamps = [-5, 3 * day + 1, 7, -day, 3 * day]  # days -1, 3, 0, -1, 3 (floored)
    schema = arrow_schema(False)
    rows = [
        {"key": None, "value": b"v%d" % i, "topic": TOPIC, "partition": 3, "offset": i,
         "timestamp": ts, "timestampType": 0, "leaderEpoch": 1}
        for i, ts in enumerate(stamps)
    ]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    catalog = ice.open_catalog(None, str(tmp_path / "wh"))
    table = ice.create_table(catalog, ("kafka", TOPIC), False)
    location = ice.data_location(table)
    out = OutputSpec(location, "j1", keep_partition_columns=True)
    written = write_batches_by_day([batch, batch.slice(0, 1)], split, out)
    assert [w.records for w in written] == [3, 1, 2]  # days -1, 0, 3
    root = location.removeprefix("file://")
    files = [location + w.path[len(root) :] for w in written if w.path]
    snapshot_id = ice.commit(table, files, {})
    table = catalog.load_table(("kafka", TOPIC))
    assert table.current_snapshot().snapshot_id == snapshot_id  # type: ignore[union-attr]
    parts = sorted((t.file.partition[0], t.file.partition[1], t.file.record_count)
                   for t in table.scan().plan_files())  # fmt: skip
    assert parts == [(3, -1, 3), (3, 0, 1), (3, 3, 2)]
    got = table.scan().to_arrow().sort_by("offset")
    assert got.column("offset").to_pylist() == [0, 0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("done", "lo", "hi", "gaps"),
    [
        ([], 0, 10, [(0, 10)]),
        ([(0, 10)], 0, 10, []),
        ([(0, 4), (4, 6)], 0, 10, [(6, 10)]),
        ([(3, 5), (7, 8)], 0, 10, [(0, 3), (5, 7), (8, 10)]),
        ([(12, 20)], 0, 10, [(0, 10)]),
        ([(0, 20)], 5, 10, []),
    ],
)
def test_missing(
    done: list[tuple[int, int]], lo: int, hi: int, gaps: list[tuple[int, int]]
) -> None:
    assert ice.missing(lo, hi, done) == gaps


def test_a_commit_on_a_stale_table_fails_and_adds_nothing(tmp_path: Path) -> None:
    """Two exports that loaded the same snapshot: the second commit fails (the export then
    removes its files), so no offset range is committed twice."""
    catalog = ice.open_catalog(None, str(tmp_path / "wh"))
    ice.create_table(catalog, ("kafka", TOPIC), False)
    first = catalog.load_table(("kafka", TOPIC))
    stale = catalog.load_table(("kafka", TOPIC))
    info: dict[str, object] = {"topicId": "t", "isolation": "read_uncommitted"}
    done = ice.committed(first)
    ice.commit(first, [], ice.summary_properties(done, TOPIC, {0: [(0, 5)]}, info))
    with pytest.raises(CommitFailedException):  # a refusal: provably nothing committed
        ice.commit(stale, [], ice.summary_properties(done, TOPIC, {0: [(0, 5)]}, info))
    table = catalog.load_table(("kafka", TOPIC))
    assert len(table.snapshots()) == 1
    assert ice.committed(table).ranges == {TOPIC: {0: [(0, 5)]}}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--writer", "spark"], "arrow writer only"),
        (["--catalog", "ftp://host/x"], "expected sqlite:///"),
        (["--catalog-property", "nokey"], "KEY=VALUE"),
        (["--table", "nonamespace"], "namespace.name"),
    ],
)
def test_bad_iceberg_options_exit_2_before_any_job(
    spark: SparkSession,
    bucket: Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    args = iceberg_args(bucket, bucket.root / "bucket", tmp_path / "wh", *extra)
    assert cli_main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "wh" / "kafka").exists()  # no table created


def test_catalog_flags_belong_to_iceberg_and_iceberg_needs_a_catalog(
    bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = iceberg_args(bucket, bucket.root / "bucket", tmp_path / "wh")
    parquet = [a for a in args if a not in ("--format", "iceberg")]
    assert cli_main([*parquet, "--output", str(tmp_path / "out")]) == 2
    assert "--warehouse: only with --format iceberg" in capsys.readouterr().err
    without = args[: args.index("--warehouse")] + args[args.index("--warehouse") + 2 :]
    assert cli_main(without) == 2
    assert "needs --warehouse or --catalog" in capsys.readouterr().err


def test_a_failing_read_leaves_none_of_the_days_files(tmp_path: Path) -> None:
    ref = SegmentRef("t/seg.log", 0, 99, 10_000, True, 0)
    split = Split(TOPIC, 0, ref, 0, 100)
    rows = [
        {"key": b"k", "value": b"v", "topic": TOPIC, "partition": 0, "offset": i,
         "timestamp": i * US_PER_DAY, "timestampType": 0, "leaderEpoch": 0}
        for i in range(3)
    ]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(rows, schema=arrow_schema(False))

    def failing() -> Iterator[pa.RecordBatch]:
        yield batch
        raise CorruptDataError("t/seg.log: bad CRC")

    out = OutputSpec(str(tmp_path), "j", row_group_rows=1, keep_partition_columns=True)
    with pytest.raises(CorruptDataError, match="bad CRC"):
        write_batches_by_day(failing(), split, out)  # three days' files were open
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_retention_past_what_the_table_holds_fails_the_run(
    spark: SparkSession, bucket: Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cron export that fell behind retention: the offsets deleted between the table's end and
    the new remote log start are data loss, not a silent hole in the table."""
    store = tmp_path / "bucket"
    shutil.copytree(bucket.root / "bucket", store)
    warehouse = tmp_path / "wh"
    first = run(iceberg_args(bucket, store, warehouse, "--to", "20"), capsys)
    assert first["ranges"] == {TOPIC: {"0": [[0, 20]], "1": [[0, 20]]}}
    for folder, objects in segment_objects(store).items():  # retention: three segments go
        starts = sorted({o.name.split("-")[0] for o in objects})
        for obj in objects:
            if obj.name.split("-")[0] in starts[:3]:
                obj.unlink()
        assert int(starts[3]) > 20, folder
    before = table_of(warehouse).current_snapshot()
    assert cli_main(iceberg_args(bucket, store, warehouse)) == 2  # the driver refuses
    err = capsys.readouterr().err
    assert "retention deleted them" in err and "offsets 20.." in err
    after = table_of(warehouse).current_snapshot()
    assert before is not None and after is not None and after.snapshot_id == before.snapshot_id


class _LostResponse(SqlCatalog):
    """The catalog commits, then the answer is lost (a read timeout after the request)."""

    def commit_table(self, table, requirements, updates):  # type: ignore[no-untyped-def]
        response = super().commit_table(table, requirements, updates)
        if any(type(u).__name__ == "AddSnapshotUpdate" for u in updates):
            raise TimeoutError("read timed out: the response was lost")
        return response


def test_a_commit_whose_answer_is_lost_keeps_its_files(
    spark: SparkSession,
    bucket: Bucket,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a refusal proves nothing was committed: a commit that may have landed keeps every
    file the table may now reference, and says its outcome is unknown."""
    warehouse = tmp_path / "wh"
    monkeypatch.setattr(ice, "SqlCatalog", _LostResponse)
    assert cli_main(iceberg_args(bucket, bucket.root / "bucket", warehouse)) == 1
    assert "outcome is unknown" in capsys.readouterr().err
    monkeypatch.undo()
    table = table_of(warehouse)
    assert table.current_snapshot() is not None  # it did land
    listed = table_files(table)
    assert listed and listed <= data_files_on_disk(table)
    assert table_rows(table) == expected(bucket)


def test_a_table_that_cannot_be_created_leaves_no_namespace(tmp_path: Path) -> None:
    catalog = ice.open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", None)
    with pytest.raises(ConfigurationError, match="give --warehouse"):
        ice.create_table(catalog, ("kafka", TOPIC), False)
    assert catalog.list_namespaces() == []
