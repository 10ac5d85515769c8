"""Kafka's DumpLogSegments on the broker's own segment files (copied before they were deleted
locally), against ``tiered-gateway dump`` on the same files; and what those files give the other
checks: their bytes, and the offset of the greatest timestamp (ListOffsets max_timestamp)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.realkafka.report import Report, Row

if TYPE_CHECKING:
    from tests.realkafka.bucket import Bucket
    from tests.realkafka.java import JavaTools

_PAIR = re.compile(r"(\w+): (\[[^\]]*\]|\S+)")
DUMP_MAIN = "kafka.tools.DumpLogSegments"


def segment_files(bucket: Bucket, topic: str, partition: int) -> list[Path]:
    """The broker's copies of the segments the remote tier holds (not one rolled after)."""
    end = bucket.remote_end(topic, partition)
    return sorted(
        p
        for p in (bucket.folder / "local" / f"{topic}-{partition}").glob("*.log")
        if int(p.stem) < end
    )


def local_log_bytes(bucket: Bucket, topic: str, partition: int) -> bytes:
    return b"".join(p.read_bytes() for p in segment_files(bucket, topic, partition))


def parse(text: str) -> list[Row]:
    """The record lines of ``DumpLogSegments --deep-iteration``, each with its batch's fields."""
    rows: list[Row] = []
    batch: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("baseOffset:"):
            batch = dict(_PAIR.findall(line))
        elif line.startswith("| offset:"):
            rec = dict(_PAIR.findall(line[2:]))
            stamp_type = "LogAppendTime" if "LogAppendTime" in rec else "CreateTime"
            rows.append(
                {
                    "offset": int(rec["offset"]),
                    "timestamp": int(rec[stamp_type]),
                    "timestampType": stamp_type,
                    "keySize": int(rec["keySize"]),
                    "valueSize": int(rec["valueSize"]),
                    "headerKeys": [
                        h.strip() for h in rec["headerKeys"][1:-1].split(",") if h.strip()
                    ],
                    "baseOffset": int(batch["baseOffset"]),
                    "leaderEpoch": int(batch["partitionLeaderEpoch"]),
                    "codec": batch["compresscodec"],
                    "producerId": int(batch["producerId"]),
                    "transactional": batch["isTransactional"] == "true",
                    "control": batch["isControl"] == "true",
                }
            )
    return rows


def kafka_dumps(java: JavaTools, paths: list[Path]) -> dict[Path, list[Row]]:
    """DumpLogSegments on every file of ``paths`` in one JVM; the rows of each file."""
    text = java.main(DUMP_MAIN, "--deep-iteration", "--files", ",".join(map(str, paths)))
    out: dict[Path, list[Row]] = {}
    for part in text.split("Dumping ")[1:]:
        name, _, body = part.partition("\n")
        out[Path(name.strip())] = parse(body)
    if set(out) != set(paths):
        raise AssertionError(f"DumpLogSegments dumped {sorted(out)}, asked for {sorted(paths)}")
    return out


def _size(b64: str | None) -> int:
    return -1 if b64 is None else len(base64.b64decode(b64))


def ours(paths: list[Path]) -> list[Row]:
    """``tiered-gateway dump`` of ``paths``, in their order, in one process."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "dump", *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stdout.splitlines():
        r = json.loads(line)
        rows.append(
            {
                "offset": r["offset"],
                "timestamp": r["timestamp"],
                "timestampType": r["timestamp_type"],
                "keySize": _size(r["key"]),
                "valueSize": _size(r["value"]),
                "headerKeys": [h["key"] for h in r["headers"]],
                "baseOffset": r["base_offset"],
                "leaderEpoch": r["leader_epoch"],
                "codec": r["codec"],
                "producerId": r["producer_id"],
                "transactional": r["transactional"],
                "control": r["control"],
            }
        )
    return rows


def max_timestamp(bucket: Bucket, topic: str, partition: int) -> dict[str, int]:
    """Kafka's MAX_TIMESTAMP over the tiered segments: the greatest timestamp of any batch
    (control batches too) and the first offset holding it, from DumpLogSegments."""
    return bucket.max_timestamps[(topic, partition)]


def checks(bucket: Bucket, report: Report) -> None:
    """Per partition: ``dump`` of the broker's segment files = DumpLogSegments of them."""
    for topic, partitions in bucket.topics.items():
        for p in range(partitions):
            paths = segment_files(bucket, topic, p)
            want = [r for path in paths for r in bucket.dumped[path]]
            report.compare(
                f"{bucket.name}/{topic}-{p} dump = DumpLogSegments",
                "dump",
                f"{bucket.name}/{topic}",
                want,
                ours(paths),
            )


def prepare(bucket: Bucket, java: JavaTools) -> None:
    """DumpLogSegments on every segment file of the bucket (one JVM), before the checks that
    need its answers."""
    every = [
        p for t, n in bucket.topics.items() for i in range(n) for p in segment_files(bucket, t, i)
    ]
    bucket.dumped = dumped = kafka_dumps(java, every)
    for topic, partitions in bucket.topics.items():
        for p in range(partitions):
            rows = [r for path in segment_files(bucket, topic, p) for r in dumped[path]]
            top = max(r["timestamp"] for r in rows)
            first = min((r for r in rows if r["timestamp"] == top), key=lambda r: r["offset"])
            bucket.max_timestamps[(topic, p)] = {
                "offset": first["offset"],
                "timestamp": top,
                "leaderEpoch": first["leaderEpoch"],
            }
