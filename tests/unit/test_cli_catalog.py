"""``tier --state-dir`` registers segments; ``catalog scan`` / ``catalog ls`` report them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.commands.catalog import EXIT_EMPTY
from gateway.errors import StorageUnavailableError
from gateway.kafka.demo import write_demo_segment
from gateway.kafka.uuids import encode_uuid, parse_topic_id
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.lifecycle import upload_registered
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import SegmentState
from gateway.metadata.open import open_manager
from gateway.remote.keyring import KeyRing
from gateway.remote.tiering import (
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.service.locate import remote_bounds
from gateway.storage.filesystem import FilesystemStore

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, Path]:
    seg = tmp_path / "seg"
    write_demo_segment(seg)
    bucket = f"file://{tmp_path / 'bucket'}"
    for partition in ("0", "1"):
        code, _, err = _run(
            capsys, "tier", str(seg), "--store", bucket, "--key-prefix", "t/",
            "--topic", "orders", "--topic-id", TOPIC_ID, "--partition", partition,
            "--include-active", "--state-dir", str(tmp_path / "writer-state"),
        )  # fmt: skip
        assert code == 0, err
    return bucket, tmp_path / "writer-state"


def test_tier_registers_finished_segments(
    tiered: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = tiered
    code, out, _ = _run(
        capsys, "catalog", "ls", "--state-dir", str(state), "--topic", "orders",
        "--partition", "1", "--json",
    )  # fmt: skip
    assert code == 0
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["state"] == "COPY_SEGMENT_FINISHED"
    assert (row["start_offset"], row["end_offset"]) == (0, 172)
    assert row["leader_epochs"] == [[0, 0], [3, 150]]
    assert row["txn_index_empty"] is False


def test_catalog_scan_json_and_table(
    tiered: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, _ = tiered
    state = tmp_path / "scan-state"
    code, out, _ = _run(
        capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t/", "--json",
        "--state-dir", str(state),
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["scan"]["registered"] == 2
    assert [(p["partition"], p["segments"], p["leader_epochs"]) for p in doc["partitions"]] == [
        (0, 1, [[0, 0], [3, 150]]),
        (1, 1, [[0, 0], [3, 150]]),
    ]
    assert doc["partitions"][0]["topic_id"] == TOPIC_ID
    assert doc["partitions"][0]["remote_log_end_offset"] == 173  # one past the last offset
    # incremental: the second scan over the same state registers nothing
    code, out, _ = _run(capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t/",
                        "--state-dir", str(state))  # fmt: skip
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["TOPIC", "TOPIC_ID", "PARTITION", "SEGMENTS"]
    assert [r.split()[:4] for r in rows] == [
        ["orders", TOPIC_ID, "0", "1"],
        ["orders", TOPIC_ID, "1", "1"],
    ]


def test_skipped_manifests_give_exit_1(
    tiered: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, _ = tiered
    (tmp_path / "bucket" / "t" / "junk.rsm-manifest").write_text("{}")
    code, _, err = _run(capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t/")
    assert code == 1
    assert "warning: skipped t/junk.rsm-manifest" in err


def _manifest_path(root: Path, partition: int) -> Path:
    (path,) = (root / "t" / f"orders-{TOPIC_ID}" / str(partition)).glob("*.rsm-manifest")
    return path


def test_unreadable_manifests_are_listed_with_the_offsets_they_claim(
    tiered: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, _ = tiered
    manifest = _manifest_path(tmp_path / "bucket", 1)
    manifest.write_bytes(manifest.read_bytes()[:30])  # cut short
    key = manifest.relative_to(tmp_path / "bucket").as_posix()
    code, out, err = _run(
        capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t/", "--json"
    )
    assert code == 1 and f"warning: skipped {key}: CorruptManifestError" in err
    doc = json.loads(out)
    (bad,) = doc["unreadable"]
    assert {k: bad[k] for k in ("topic", "topic_id", "partition", "start_offset", "key")} == {
        "topic": "orders",
        "topic_id": TOPIC_ID,
        "partition": 1,
        "start_offset": 0,
        "key": key,
    }
    assert "not JSON" in bad["reason"]
    assert [(p["partition"], p["unreadable"]) for p in doc["partitions"]] == [(0, 0)]
    code, out, _ = _run(capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t/")
    assert code == 1
    table, unreadable = out.split("\n\nUNREADABLE")
    assert [r.split()[:4] for r in table.splitlines()[1:]] == [["orders", TOPIC_ID, "0", "1"]]
    header, row = unreadable.splitlines()[1:]
    assert header.split() == ["TOPIC", "TOPIC_ID", "PARTITION", "START_OFFSET", "KEY", "REASON"]
    assert row.split()[:6] == ["orders", TOPIC_ID, "1", "0", key, "CorruptManifestError:"]


def test_a_store_fault_exits_2_and_leaves_the_catalog_as_it_was(
    tiered: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bucket that cannot be listed (here: its directory is gone) is not an empty bucket: the
    scan fails and the kept catalog still has every segment."""
    bucket, _ = tiered
    state = str(tmp_path / "scan-state")
    scan = ["catalog", "scan", "--store", bucket, "--key-prefix", "t/", "--state-dir", state]
    assert _run(capsys, *scan)[0] == 0
    (tmp_path / "bucket").rename(tmp_path / "unmounted")
    code, _, err = _run(capsys, *scan)
    assert code == 2 and err.startswith("error: ") and "not a directory" in err
    for partition in ("0", "1"):
        code, out, _ = _run(
            capsys, "catalog", "ls", "--state-dir", state, "--topic", "orders",
            "--partition", partition, "--json",
        )  # fmt: skip
        assert code == 0
        assert [json.loads(line)["state"] for line in out.splitlines()] == ["COPY_SEGMENT_FINISHED"]


def test_ls_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "catalog", "ls", "--topic", "x", "--partition", "0")
    assert (code, err.count("\n")) == (2, 1) and "needs --store" in err
    code, _, err = _run(
        capsys, "catalog", "ls", "--state-dir", str(tmp_path), "--topic", "x", "--partition", "0"
    )
    assert code == 2 and "unknown topic 'x'" in err


class FailingStore(FilesystemStore):
    """Fails the manifest upload, as a bucket outage half-way through a copy would."""

    async def put(self, key: str, data: bytes) -> None:
        if key.endswith(".rsm-manifest"):
            raise StorageUnavailableError("503 SlowDown")
        await super().put(key, data)


async def test_failed_upload_is_deregistered_and_cleaned(tmp_path: Path) -> None:
    write_demo_segment(tmp_path / "seg")
    (local,) = read_segment_dir(tmp_path / "seg", include_active=True)
    meta = segment_metadata(local, topic="orders", topic_id=uuid.UUID(int=1), partition=0)
    objects: SegmentObjects = build_segment_objects(
        local, meta, key_prefix="t/", options=TieringOptions(), keys=KeyRing()
    )
    store = FailingStore(tmp_path / "bucket")
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    with pytest.raises(StorageUnavailableError):
        await upload_registered(store, objects, rlmm)
    tp = rlmm.partitions()[0]
    assert rlmm.list_remote_log_segments(tp) == []  # STARTED, DELETE_STARTED, DELETE_FINISHED
    assert rlmm.remote_log_size(tp) == 0
    assert [info.key async for info in store.list("")] == []  # the .log and .indexes are gone
    ok = await upload_registered(FilesystemStore(tmp_path / "bucket"), objects, rlmm)
    assert ok.state is SegmentState.COPY_SEGMENT_FINISHED


def test_open_manager_in_memory_without_state_dir() -> None:
    rlmm = open_manager(None)
    assert rlmm.partitions() == []
    rlmm.close()


# --- what surprised a new user (each of these failed before its fix) -------------------------


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_a_prefix_without_its_slash_is_one_warning_with_the_fix(
    tiered: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: one ``skipped`` warning per manifest about a topic named ``'/orders'``, and a
    table of nothing."""
    bucket, _ = tiered
    code, out, err = _run(capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "t")
    assert code == EXIT_EMPTY
    (warning,) = _warnings(err)
    assert "2 manifests are under 't/'" in warning
    assert "did you mean the key prefix 't/'?" in warning
    assert "'/orders" not in err
    assert out == ""  # before: the header of an empty table, and exit code 1


def test_a_wrong_prefix_names_the_folder_and_the_nearest_prefix(
    tiered: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, _ = tiered
    code, _, err = _run(capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "tt/")
    assert code == EXIT_EMPTY
    (warning,) = _warnings(err)
    assert warning.startswith("warning: no remote segment found under the key prefix 'tt/'")
    assert f"the folder {tmp_path / 'bucket' / 'tt'} does not exist" in warning
    assert "did you mean the key prefix 't/' (2 manifests)?" in warning
    code, out, err = _run(
        capsys, "catalog", "scan", "--store", bucket, "--key-prefix", "tt/", "--json"
    )
    assert code == EXIT_EMPTY
    assert "did you mean" in json.loads(out)["scan"]["scope_warning"]


def test_an_empty_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = _run(capsys, "catalog", "scan", "--store", f"file://{tmp_path / 'empty'}")
    assert code == EXIT_EMPTY
    assert _warnings(err) == [
        "warning: no remote segment found under the bucket: the bucket is empty"
    ]


def test_ls_in_an_empty_scope_warns_instead_of_unknown_topic(
    tiered: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, _ = tiered
    code, out, err = _run(
        capsys, "catalog", "ls", "--store", bucket, "--key-prefix", "t", "--topic", "orders",
        "--partition", "0",
    )  # fmt: skip
    assert (code, out) == (EXIT_EMPTY, "")
    (warning,) = _warnings(err)
    assert "did you mean the key prefix 't/'?" in warning
    assert "error" not in err


def test_the_end_offset_is_one_past_the_last_as_in_the_http_api(
    tiered: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``REMOTE_LOG_END_OFFSET`` 172 (the last offset) where HTTP says 173."""
    _, state = tiered
    code, out, _ = _run(
        capsys, "catalog", "scan", "--store", tiered[0], "--key-prefix", "t/", "--json"
    )
    assert code == 0
    rlmm = open_manager(state)  # the catalog `tier` kept: the same segments
    try:
        tp = rlmm.partition("orders", 0, parse_topic_id(TOPIC_ID))
        http_start, http_end = remote_bounds(rlmm, tp)  # what /v1/.../partitions answers
    finally:
        rlmm.close()
    row = json.loads(out)["partitions"][0]
    assert (row["remote_log_start_offset"], row["remote_log_end_offset"]) == (
        http_start,
        http_end,
    )
    assert http_end == 173  # the demo segment holds offsets 0..172
    _, table, _ = _run(capsys, "catalog", "scan", "--store", tiered[0], "--key-prefix", "t/")
    header, first, *_ = table.splitlines()
    assert dict(zip(header.split(), first.split(), strict=False))["REMOTE_LOG_END_OFFSET"] == "173"


def test_ls_says_which_segment_displaced_a_reupload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: two COPY_SEGMENT_FINISHED rows for the same offsets, nothing said which one
    reads reach."""
    write_demo_segment(tmp_path / "seg")
    (local,) = read_segment_dir(tmp_path / "seg", include_active=True)
    first = segment_metadata(local, topic="orders", topic_id=parse_topic_id(TOPIC_ID), partition=0)
    later = dataclasses.replace(
        first, segment_id=uuid.uuid4(), event_timestamp_ms=first.event_timestamp_ms + 1
    )
    store = FilesystemStore(tmp_path / "bucket")
    for meta in (first, later):
        objects = build_segment_objects(
            local, meta, key_prefix="t/", options=TieringOptions(), keys=KeyRing()
        )
        asyncio.run(upload_segment(store, objects))
    args = ["catalog", "ls", "--store", f"file://{tmp_path / 'bucket'}", "--key-prefix", "t/"]
    args += ["--topic", "orders", "--partition", "0"]
    code, out, _ = _run(capsys, *args, "--json")
    assert code == 0
    rows = {row["segment_id"]: row for row in map(json.loads, out.splitlines())}
    old, new = (rows[encode_uuid(m.segment_id)] for m in (first, later))
    assert (old["state"], new["state"]) == ("COPY_SEGMENT_FINISHED",) * 2
    assert (old["displaced"], old["displaced_by"]) == (True, new["segment_id"])
    assert (new["displaced"], new["displaced_by"]) == (False, None)
    code, table, _ = _run(capsys, *args)
    header, *lines = table.splitlines()
    column = header.split().index("DISPLACED_BY")
    by_id = {line.split()[0]: line.split()[column] for line in lines}
    assert by_id == {old["segment_id"]: new["segment_id"], new["segment_id"]: "-"}


def test_ls_into_a_closed_pipe_exits_0_quietly(tiered: tuple[str, Path]) -> None:
    """``catalog ls | head``: before, ``error: : Broken pipe`` and exit 2. The pipe's reading
    end is closed before the command starts, so its first write fails, every time."""
    bucket, _ = tiered
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "catalog", "ls", "--store", bucket,
             "--key-prefix", "t/", "--topic", "orders", "--partition", "0"],
            stdout=write_end, stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr.decode()) == (0, "")
