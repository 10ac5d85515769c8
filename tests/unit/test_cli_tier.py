"""``tiered-gateway tier`` re-run on the same folder: segments already in the store are skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.kafka.demo import write_demo_segment

TOPIC_ID = "6b1c4bd6-6d1f-4a4e-9f0e-6a2f1f0f6b1c"


def _tier(
    capsys: pytest.CaptureFixture[str], folder: Path, bucket: Path, *extra: str
) -> list[dict[str, object]]:
    argv = ["tier", str(folder), "--store", f"file://{bucket}", "--key-prefix", "tiered/"]
    argv += ["--topic", "orders", "--topic-id", TOPIC_ID, "--partition", "3", "--include-active"]
    assert main([*argv, *extra]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def partition(tmp_path: Path) -> tuple[Path, Path]:
    """A demo partition folder and the (not yet existing) bucket folder to tier it to."""
    write_demo_segment(tmp_path / "partition")
    return tmp_path / "partition", tmp_path / "bucket"


def _objects(bucket: Path) -> list[str]:
    return sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*") if p.is_file())


def test_a_second_run_skips_what_is_there(
    partition: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, bucket = partition
    (first,) = _tier(capsys, folder, bucket)
    assert "skipped" not in first
    stored = _objects(bucket)
    assert len(stored) == 3
    (second,) = _tier(capsys, folder, bucket)
    assert second["skipped"] is True and "already in the store" in str(second["reason"])
    assert second["key"] == first["key"]
    assert (second["start_offset"], second["end_offset"], second["size"]) == (
        first["start_offset"],
        first["end_offset"],
        first["size"],
    )
    assert _objects(bucket) == stored  # nothing written


def test_force_uploads_a_second_copy(
    partition: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, bucket = partition
    _tier(capsys, folder, bucket)
    (again,) = _tier(capsys, folder, bucket, "--force")
    assert "skipped" not in again
    assert len(_objects(bucket)) == 6


def test_another_topic_id_or_partition_is_not_the_same_segment(
    partition: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, bucket = partition
    _tier(capsys, folder, bucket)
    argv = ["tier", str(folder), "--store", f"file://{bucket}", "--key-prefix", "tiered/"]
    argv += ["--topic", "orders", "--include-active"]
    assert main([*argv, "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ", "--partition", "3"]) == 0
    assert main([*argv, "--topic-id", TOPIC_ID, "--partition", "4"]) == 0
    out, _ = capsys.readouterr()
    assert [json.loads(line).get("skipped") for line in out.splitlines()] == [None, None]
    assert len(_objects(bucket)) == 9


def test_a_segment_that_grew_is_uploaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same start offset, different end offset and size (the active segment, tiered before
    it was rolled): not the same segment."""
    folder, bucket = tmp_path / "partition", tmp_path / "bucket"
    files = write_demo_segment(folder)
    log = files.log.read_bytes()
    cut = _first_batches_size(log, 3)
    files.log.write_bytes(log[:cut])
    (short,) = _tier(capsys, folder, bucket)
    files.log.write_bytes(log)
    (full,) = _tier(capsys, folder, bucket)
    assert "skipped" not in full and full["end_offset"] != short["end_offset"]
    assert len(_objects(bucket)) == 6


def _first_batches_size(log: bytes, count: int) -> int:
    pos = 0
    for _ in range(count):
        pos += 12 + int.from_bytes(log[pos + 8 : pos + 12], "big")
    return pos


def test_a_manifest_without_its_log_is_uploaded_again(
    partition: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest whose ``.log`` is gone (deleted half-way) does not count as uploaded."""
    folder, bucket = partition
    (first,) = _tier(capsys, folder, bucket)
    (bucket / str(first["key"])).unlink()
    (again,) = _tier(capsys, folder, bucket)
    assert "skipped" not in again and again["key"] != first["key"]
