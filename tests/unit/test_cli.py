"""``tiered-gateway dump``: NDJSON output, --batches, --verify-crc, one-line errors."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.demo import write_demo_segment


@pytest.fixture
def demo_log(tmp_path: Path) -> Path:
    return write_demo_segment(tmp_path / "seg").log


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_records_as_ndjson(demo_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = _run(capsys, "dump", str(demo_log))
    assert code == 0 and err == ""
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 173 and [r["offset"] for r in rows] == list(range(173))
    first = rows[0]
    assert set(first) == {
        "offset", "timestamp", "timestamp_type", "key", "value", "headers", "base_offset",
        "leader_epoch", "codec", "producer_id", "transactional", "control",
    }  # fmt: skip
    assert base64.b64decode(first["value"]).startswith(b"order 0: ")
    assert first["headers"] == [
        {"key": "source", "value": "ZGVtbw=="},
        {"key": "trace", "value": None},
    ]
    tombstone = rows[150]
    assert tombstone["value"] is None and tombstone["leader_epoch"] == 3
    assert {r["timestamp_type"] for r in rows[151:161]} == {"LogAppendTime"}
    assert {r["codec"] for r in rows} == {"none", "gzip", "snappy", "lz4", "zstd"}
    markers = [r for r in rows if r["control"]]
    assert [m["control_type"] for m in markers] == ["COMMIT", "ABORT"]


def test_batches_mode(demo_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = _run(capsys, "dump", "--batches", "--verify-crc", str(demo_log))
    rows = [json.loads(line) for line in lines]
    assert code == 0 and len(rows) == 12
    assert all(r["crc_valid"] for r in rows)
    assert rows[1]["position"] == rows[0]["size"]
    assert sum(r["size"] for r in rows) == demo_log.stat().st_size


def _flip_last_byte_of_batch(path: Path, index: int) -> int:
    data = bytearray(path.read_bytes())
    pos = 0
    for _ in range(index):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
    data[end - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    return pos


def test_verify_crc_names_the_first_bad_batch(
    demo_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pos = _flip_last_byte_of_batch(demo_log, 4)
    code, lines, err = _run(capsys, "dump", "--verify-crc", str(demo_log))
    assert code == 2
    assert err.count("\n") == 1 and f"position {pos}" in err and "CRC" in err
    assert len(lines) == 100  # the four good batches before it


def test_without_verify_crc_a_bad_batch_is_a_warning(
    demo_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pos = _flip_last_byte_of_batch(demo_log, 0)
    code, lines, err = _run(capsys, "dump", "--batches", str(demo_log))
    assert code == 1
    assert json.loads(lines[0])["crc_valid"] is False
    assert f"warning: {demo_log}: batch at position {pos}" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is a README, not a Kafka segment\n" * 3, "not a whole record batch"),
        (build_batch(0, [RecordInput(b"v", timestamp=1)])[:-3], "not a whole record batch"),
        (b"\x00" * 8 + struct.pack(">i", 5) + b"\x00" * 20, "below the minimum"),
        (
            build_batch(0, [RecordInput(b"v", timestamp=1)])[:16]
            + b"\x01"
            + build_batch(0, [RecordInput(b"v", timestamp=1)])[17:],
            "legacy format (magic 0/1) not supported",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    code, _, err = _run(capsys, "dump", str(path))
    assert code == 2 and message in err and err.count("\n") == 1


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "dump", str(tmp_path / "nope.log"))
    assert code == 2 and "cannot read" in err and err.count("\n") == 1


def test_console_script_never_prints_a_traceback(tmp_path: Path, demo_log: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_bytes(b"\xff" * 100)
    exe = Path(sys.executable).with_name("tiered-gateway")
    done = subprocess.run([exe, "dump", str(bad)], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ")
    ok = subprocess.run([exe, "dump", str(demo_log)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and len(ok.stdout.splitlines()) == 173


def test_empty_file_is_an_empty_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"")
    assert _run(capsys, "dump", str(path)) == (0, [], "")


def _head(argv: list[str], lines: int = 1) -> tuple[int, bytes]:
    """Run the console script into a real pipe, read ``lines`` lines and close it, as ``head``
    does; the exit code and everything the command wrote to stderr."""
    exe = Path(sys.executable).with_name("tiered-gateway")
    proc = subprocess.Popen([exe, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(lines):
        proc.stdout.readline()
    proc.stdout.close()
    code = proc.wait(timeout=60)
    return code, proc.stderr.read()


def test_broken_pipe_is_not_an_error(demo_log: Path) -> None:
    # 8 copies: far more than a pipe buffer holds, so the writer meets the closed pipe
    code, err = _head(["dump", *[str(demo_log)] * 8])
    assert (code, err) == (0, b"")


def test_broken_pipe_of_a_command_that_prints_at_the_end(
    tmp_path: Path, demo_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``catalog ls | head``: the table goes out after the work, into a pipe nobody reads any
    more; this was ``error: : Broken pipe`` and exit code 2."""
    store = f"file://{tmp_path / 'bucket'}"
    tier = ["tier", str(demo_log.parent), "--store", store, "--topic", "orders"]
    tier += ["--topic-id", "6b1c4bd6-6d1f-4a4e-9f0e-6a2f1f0f6b1c", "--partition", "0"]
    assert main([*tier, "--include-active"]) == 0
    capsys.readouterr()
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    exe = Path(sys.executable).with_name("tiered-gateway")
    argv = ["catalog", "ls", "--store", store, "--topic", "orders", "--partition", "0"]
    try:
        done = subprocess.run(
            [exe, *argv], stdout=write_end, stderr=subprocess.PIPE, check=False, timeout=60
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, b"")
