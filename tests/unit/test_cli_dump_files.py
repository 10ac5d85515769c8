"""``tiered-gateway dump`` beyond one ``.log``: several files per run, the indexes, the producer
snapshot and the leader-epoch checkpoint, and ``--offsets-decoder`` (``__consumer_offsets``).

The offsets records are encoded with aiokafka's protocol types (an independent encoder) after
Kafka's ``OffsetCommitKey``/``GroupMetadataKey``/``OffsetCommitValue``/``GroupMetadataValue``
schemas."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol.types import (
    Array,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
)

from gateway.cli import main
from gateway.errors import CorruptRecordError
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.consumer_offsets import decode_key, decode_value
from gateway.kafka.demo import write_demo_segment
from gateway.kafka.epoch import parse_leader_epoch_checkpoint
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.producer_snapshot import parse_producer_snapshot
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import TransactionIndex
from gateway.kafka.writer import SegmentFiles

S = String("utf-8")
CS = CompactString("utf-8")
NO_TAGS = b"\x00"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def files(tmp_path: Path) -> SegmentFiles:
    return write_demo_segment(tmp_path / "seg")


def test_every_file_of_a_partition_folder(
    files: SegmentFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    assert files.txn_index is not None
    code, rows, err = _run(
        capsys,
        "dump",
        str(files.offset_index),
        str(files.time_index),
        str(files.txn_index),
        str(files.producer_snapshot),
        str(files.leader_epoch_checkpoint),
    )
    assert (code, err) == (0, "")
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_file.setdefault(row.pop("file"), []).append(row)
    offsets = OffsetIndex(files.offset_index.read_bytes(), 0)
    assert by_file[str(files.offset_index)] == [
        {"offset": e.offset, "position": e.position} for e in offsets.entries()
    ]
    assert len(offsets) > 1
    times = TimeIndex(files.time_index.read_bytes(), 0)
    assert by_file[str(files.time_index)] == [
        {"timestamp": e.timestamp, "offset": e.offset} for e in times.entries()
    ]
    txns = TransactionIndex(files.txn_index.read_bytes(), 0)
    assert by_file[str(files.txn_index)] == [t._asdict() for t in txns] != []
    snapshot = parse_producer_snapshot(files.producer_snapshot.read_bytes())
    assert by_file[str(files.producer_snapshot)] == [e._asdict() for e in snapshot] != []
    epochs = parse_leader_epoch_checkpoint(files.leader_epoch_checkpoint.read_bytes())
    assert by_file[str(files.leader_epoch_checkpoint)] == [
        {"epoch": e.epoch, "start_offset": e.start_offset} for e in epochs
    ]
    assert [e.epoch for e in epochs] == [0, 3]


def test_one_file_lines_carry_no_file_field(
    files: SegmentFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rows, _ = _run(capsys, "dump", str(files.leader_epoch_checkpoint))
    assert code == 0 and rows == [
        {"epoch": 0, "start_offset": 0},
        {"epoch": 3, "start_offset": 150},
    ]


def test_several_logs_in_one_run(files: SegmentFiles, capsys: pytest.CaptureFixture[str]) -> None:
    code, rows, _ = _run(capsys, "dump", "--batches", str(files.log), str(files.log))
    assert code == 0 and len(rows) == 24 and {r["file"] for r in rows} == {str(files.log)}


def test_an_index_failing_kafkas_sanity_check_is_printed_and_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(bytes.fromhex("00000005000000000000000a00000100") + b"\x00\x00\x00")
    code, rows, err = _run(capsys, "dump", str(path))
    assert code == 1
    assert rows == [{"offset": 105, "position": 0}, {"offset": 110, "position": 256}]
    assert f"warning: {path}: offset index is 19 bytes" in err


def test_other_files_are_skipped_with_a_warning(
    files: SegmentFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "partition.metadata"
    other.write_text("version: 0\n")
    code, rows, err = _run(capsys, "dump", str(other), str(files.leader_epoch_checkpoint))
    assert code == 1 and len(rows) == 2
    assert f"warning: {other}: not a .log" in err and "skipped" in err


def test_a_bad_file_stops_the_run_with_one_error_line(
    files: SegmentFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "00000000000000000000.snapshot"
    bad.write_bytes(b"\x00\x01garbage")
    code, _, err = _run(capsys, "dump", str(bad), str(files.leader_epoch_checkpoint))
    assert code == 2 and err.startswith(f"error: {bad}: ") and err.count("\n") == 1


# --- __consumer_offsets ---------------------------------------------------------------------

OFFSET_COMMIT_KEY = Schema(("version", Int16), ("group", S), ("topic", S), ("partition", Int32))
GROUP_METADATA_KEY = Schema(("version", Int16), ("group", S))
OFFSET_COMMIT_VALUES = {
    0: Schema(("v", Int16), ("offset", Int64), ("metadata", S), ("commit", Int64)),
    1: Schema(
        ("v", Int16), ("offset", Int64), ("metadata", S), ("commit", Int64), ("expire", Int64)
    ),
    2: Schema(("v", Int16), ("offset", Int64), ("metadata", S), ("commit", Int64)),
    3: Schema(
        ("v", Int16), ("offset", Int64), ("epoch", Int32), ("metadata", S), ("commit", Int64)
    ),
    4: Schema(
        ("v", Int16), ("offset", Int64), ("epoch", Int32), ("metadata", CS), ("commit", Int64)
    ),
}


def _offset_commit_value(version: int) -> tuple[bytes, dict[str, Any]]:
    fields: list[Any] = [version, 42]
    expected: dict[str, Any] = {"version": version, "offset": 42, "leader_epoch": -1}
    if version >= 3:
        fields.append(7)
        expected["leader_epoch"] = 7
    fields += ["meta-ü", 1_700_000_000_123]
    expected |= {"metadata": "meta-ü", "commit_timestamp": 1_700_000_000_123}
    expected["expire_timestamp"] = -1
    if version == 1:
        fields.append(1_800_000_000_000)
        expected["expire_timestamp"] = 1_800_000_000_000
    data = OFFSET_COMMIT_VALUES[version].encode(fields)
    if version == 4:
        data += b"\x01\x05\x02hi"  # one unknown tagged field: skipped
    return data, expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_values(version: int) -> None:
    data, expected = _offset_commit_value(version)
    assert decode_value("offset_commit", data) == expected


def _member(version: int) -> tuple[bytes, dict[str, Any]]:
    flexible = version >= 4
    s, b = (CS, CompactBytes) if flexible else (S, Bytes)
    out = s.encode("consumer-1-abc")
    if version >= 3:
        out += s.encode(None if version == 3 else "instance-1")
    out += s.encode("consumer-1") + s.encode("/10.0.0.1")
    if version >= 1:
        out += Int32.encode(300_000)
    out += Int32.encode(45_000) + b.encode(b"\x00\x01sub") + b.encode(b"")
    if flexible:
        out += NO_TAGS
    expected = {
        "member_id": "consumer-1-abc",
        "group_instance_id": "instance-1" if version == 4 else None,
        "client_id": "consumer-1",
        "client_host": "/10.0.0.1",
        "rebalance_timeout": 300_000 if version >= 1 else None,
        "session_timeout": 45_000,
        "subscription": base64.b64encode(b"\x00\x01sub").decode(),
        "assignment": "",
    }
    return out, expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_values(version: int) -> None:
    flexible = version >= 4
    s = CS if flexible else S
    member, member_expected = _member(version)
    data = Int16.encode(version) + s.encode("consumer") + Int32.encode(5)
    data += s.encode("range") + s.encode(None)
    if version >= 2:
        data += Int64.encode(1_700_000_000_000)
    data += (CompactArray(Int32) if flexible else Array(Int32)).encode([1])[:-4]  # the count
    data += member + (NO_TAGS if flexible else b"")
    assert decode_value("group_metadata", data) == {
        "version": version,
        "protocol_type": "consumer",
        "generation": 5,
        "protocol": "range",
        "leader": None,
        "current_state_timestamp": 1_700_000_000_000 if version >= 2 else -1,
        "members": [member_expected],
    }


def test_keys() -> None:
    for version in (0, 1):
        key = OFFSET_COMMIT_KEY.encode([version, "g1", "orders", 3])
        assert decode_key(key) == {
            "type": "offset_commit",
            "version": version,
            "group": "g1",
            "topic": "orders",
            "partition": 3,
        }
    assert decode_key(GROUP_METADATA_KEY.encode([2, "g1"])) == {
        "type": "group_metadata",
        "version": 2,
        "group": "g1",
    }
    assert decode_key(Int16.encode(3) + b"anything") == {"type": "unknown", "version": 3}


@pytest.mark.parametrize(
    "data",
    [
        OFFSET_COMMIT_KEY.encode([1, "g1", "orders", 3])[:-1],  # cut
        OFFSET_COMMIT_KEY.encode([1, "g1", "orders", 3]) + b"\x00",  # left over
        GROUP_METADATA_KEY.encode([2, "g1"])[:2] + b"\x00\x02\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_keys(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(data)


def test_offsets_decoder_in_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commit, commit_expected = _offset_commit_value(3)
    records = [
        RecordInput(commit, key=OFFSET_COMMIT_KEY.encode([1, "g1", "orders", 3]), timestamp=1),
        RecordInput(None, key=OFFSET_COMMIT_KEY.encode([1, "g1", "orders", 4]), timestamp=2),
        RecordInput(b"\x00", key=GROUP_METADATA_KEY.encode([2, "g1"]), timestamp=3),
        RecordInput(b"v", key=None, timestamp=4),
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch(0, records))
    code, rows, err = _run(capsys, "dump", "--offsets-decoder", str(path))
    assert (code, err) == (0, "")
    decoded = [r["offsets"] for r in rows]
    assert decoded[0] == {
        "key": {
            "type": "offset_commit",
            "version": 1,
            "group": "g1",
            "topic": "orders",
            "partition": 3,
        },
        "value": commit_expected,
    }
    assert decoded[1]["value"] is None  # a tombstone: the committed offset was deleted
    assert "error" in decoded[2] and "runs past the end" in decoded[2]["error"]
    assert decoded[3] == {"error": "record without a key"}
    assert rows[0]["key"] == base64.b64encode(records[0].key or b"").decode()  # still there


def test_without_the_decoder_lines_are_unchanged(
    files: SegmentFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    _, rows, _ = _run(capsys, "dump", str(files.log))
    assert all("offsets" not in r for r in rows)


def test_an_offset_index_is_checked_against_its_segment(
    files: SegmentFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = list(OffsetIndex(files.offset_index.read_bytes(), 0).entries())
    assert len(entries) >= 2
    data = bytearray(files.offset_index.read_bytes())
    data[4:8] = (entries[0].position + 1).to_bytes(4, "big")  # entry 0 points inside a batch
    data[8:12] = (entries[1].offset - 1).to_bytes(4, "big")  # entry 1 names the wrong offset
    files.offset_index.write_bytes(bytes(data))
    code, rows, err = _run(capsys, "dump", str(files.offset_index))
    assert code == 1 and len(rows) == len(entries)
    warnings = err.splitlines()
    assert warnings[0] == (
        f"warning: {files.offset_index}: entry 0 (offset {entries[0].offset}): "
        f"no batch starts at position {entries[0].position + 1}"
    )
    assert warnings[1] == (
        f"warning: {files.offset_index}: entry 1: offset {entries[1].offset - 1}, but the batch "
        f"at position {entries[1].position} ends at offset {entries[1].offset}"
    )
    assert len(warnings) == 2
    files.log.unlink()  # without its segment: printed, not checked
    assert _run(capsys, "dump", str(files.offset_index))[0] == 0
