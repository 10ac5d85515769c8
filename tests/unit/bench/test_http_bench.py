"""The end-to-end HTTP benchmark's own parts: the bucket, the CPU accounting, the report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kafka.record import MemoryRecords

from tests.bench import http_report
from tests.bench.http_bucket import KEY, bench_bucket
from tests.bench.http_load import Measured
from tests.bench.http_peer import decode_log
from tests.bench.http_procs import self_cpu_s, tree_cpu_s
from tests.bench.http_report import Cold, Results

BURN = """import sys, time
while time.process_time() < 0.3:
    pass
print("done", flush=True)
sys.stdin.read()
"""


def test_bucket_is_kafka_python_batches_in_segments_and_reused(tmp_path: Path) -> None:
    bucket = bench_bucket(tmp_path, 12_000, 1)
    assert bucket.segments == 3  # ~2.6 MiB of log in 1 MiB segments
    offset = 0
    for log in bucket.logs:
        assert int(log.name.split("-", 1)[0]) == offset  # named by base offset, in order
        records = MemoryRecords(log.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            for record in batch:
                assert (record.offset, record.key) == (offset, KEY % offset)
                assert len(record.value) == 200
                offset += 1
    assert offset == bucket.records == sum(decode_log(p.read_bytes()) for p in bucket.logs)
    mtime = bucket.logs[0].stat().st_mtime_ns
    assert bench_bucket(tmp_path, 12_000, 1) == bucket  # from the cache, not rebuilt
    assert bucket.logs[0].stat().st_mtime_ns == mtime


def test_tree_cpu_counts_live_descendants() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        burnt = tree_cpu_s(child.pid)
        assert burnt >= 0.29
        own = self_cpu_s()  # read first: the tree, read after, holds at least this much of us
        tree = tree_cpu_s(os.getpid())
        # the child counts for its parent; all three are counts of clock ticks, compared as
        # such (as floats, 4.02 + 0.29 > 4.31)
        assert _ticks(tree) >= _ticks(own) + _ticks(burnt)
    finally:
        child.communicate("")


def _ticks(seconds: float) -> int:
    return round(seconds * os.sysconf("SC_CLK_TCK"))


def _results() -> Results:
    m = Measured(units=1_200_000, requests=10, wall_s=2.0, server_cpu_s=1.0, client_cpu_s=0.5)
    r = Results(args={"records": 10, "segments": 1, "segment_mib": 1, "log_mib": 2.0,
                      "window_mib": 1, "clients": 1, "repeats": 1, "seconds": 1.0,
                      "max_bytes": 2**20, "ndjson_bytes": 2**20})  # fmt: skip
    r.gateway = {"json": m, "ndjson": Measured(800_000, 10, 2.0, 1.0, 0.5)}
    r.memory["idle"] = (330.0, [100.0, 120.0, 110.0])  # the supervisor and two workers
    return r


def test_verdicts_follow_the_goals() -> None:
    rows = {row[0].split(":")[0]: row for row in http_report.rows(_results())}
    assert rows["warm JSON"][-1] == "**pass**"  # 1.2 M >= 1 M
    assert rows["warm NDJSON"][-1] == "fail"  # 800 k < 1 M
    assert rows["warm raw"][-1] == "not measured"
    assert rows["cold reads"][-1] == "not measured"
    assert rows["memory idle"][-1] == "fail"  # 330 MiB over 2 workers: 165 > 150 per worker
    r = _results()
    r.cold = Cold(100, 0.2, 0.5, 0.06, "", direct_p99_s=0.3)
    assert {row[0].split(":")[0]: row for row in http_report.rows(r)}["cold reads"][
        -1
    ] == "**pass**"
    r.cold = Cold(100, 0.2, 0.5, 0.06, "", direct_p99_s=0.3, shed=2)  # fast, but not all read
    cold = {row[0].split(":")[0]: row for row in http_report.rows(r)}["cold reads"]
    assert cold[-1] == "fail" and "2 shed (503)" in cold[1]


def test_docs_section_is_appended_once_then_replaced(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nbefore\n")
    http_report.write_docs(docs, _results())
    r = _results()
    r.notes.append("second run")
    http_report.write_docs(docs, r)
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\nbefore\n")
    assert text.count(http_report.SECTION) == text.count(http_report.BEGIN) == 1
    assert "Note: second run." in text
