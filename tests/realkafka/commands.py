"""The command-line and Spark surfaces: ``catalog scan`` and ``catalog ls`` against the broker's
``__remote_log_metadata`` records, and :mod:`tests.realkafka.spark_checks` (the Spark source and
stream, ``export``, ``scrub``) in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.realkafka.bucket import Bucket
from tests.realkafka.report import Report, Row


def catalog_checks(bucket: Bucket, args: list[str], report: Report, work: Path) -> None:
    """``catalog scan --state-dir`` (then ``catalog ls`` from that catalog, without a rescan)
    against the broker's ``__remote_log_metadata`` records."""
    state = work / f"catalog-{bucket.name}"
    if not scan_check(bucket, [*args, "--state-dir", str(state)], report):
        return
    want = sorted(
        (
            {
                "topic": s["topic"],
                "partition": s["partition"],
                "segment_id": s["segmentId"],
                "start_offset": s["startOffset"],
                "end_offset": s["endOffset"],
                "size": s["segmentSizeInBytes"],
                "max_timestamp_ms": s["maxTimestampMs"],
                "leader_epochs": sorted([int(e), o] for e, o in s["segmentLeaderEpochs"].items()),
                "txn_index_empty": s["txnIdxEmpty"],
            }
            for s in bucket.segments.values()
        ),
        key=lambda r: (r["topic"], r["partition"], r["start_offset"]),
    )
    got: list[Row] = []
    name = f"{bucket.name} catalog ls = __remote_log_metadata"
    for topic, partitions in bucket.topics.items():
        for p in range(partitions):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "catalog",
                    "ls",
                    "--state-dir",
                    str(state),
                    "--topic",
                    topic,
                    "--partition",
                    str(p),
                    "--json",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                report.fail(name, f"exit {done.returncode}: {done.stderr[-300:]}")
                return
            for line in done.stdout.splitlines():
                s = json.loads(line)
                got.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "segment_id": s["segment_id"],
                        "start_offset": s["start_offset"],
                        "end_offset": s["end_offset"],
                        "size": s["size"],
                        "max_timestamp_ms": s["max_timestamp_ms"],
                        "leader_epochs": s["leader_epochs"],
                        "txn_index_empty": s["txn_index_empty"],
                    }
                )
    got.sort(key=lambda r: (r["topic"], r["partition"], r["start_offset"]))
    report.compare(name, "catalog", bucket.name, want, got)


def scan_check(bucket: Bucket, args: list[str], report: Report) -> bool:
    """``catalog scan --json``: one line per partition, from the broker's segment records."""
    name = f"{bucket.name} catalog scan = __remote_log_metadata"
    parts: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in bucket.segments.values():
        parts.setdefault((s["topic"], s["partition"]), []).append(s)
    want = []
    for (topic, p), segs in sorted(parts.items()):
        epochs: dict[int, int] = {}
        for s in segs:
            for e, o in s["segmentLeaderEpochs"].items():
                epochs[int(e)] = min(o, epochs.get(int(e), o))
        want.append(
            {
                "topic": topic,
                "topic_id": segs[0]["topicId"],
                "partition": p,
                "segments": len(segs),
                "remote_log_start_offset": min(s["startOffset"] for s in segs),
                "remote_log_end_offset": max(s["endOffset"] for s in segs) + 1,
                "size": sum(s["segmentSizeInBytes"] for s in segs),
                "leader_epochs": sorted([e, o] for e, o in epochs.items()),
                "unreadable": 0,
            }
        )
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "catalog", "scan", *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        report.fail(name, f"exit {done.returncode}: {done.stderr[-300:]}")
        return False
    got = sorted(json.loads(done.stdout)["partitions"], key=lambda r: (r["topic"], r["partition"]))
    report.compare(name, "catalog", bucket.name, want, got)
    return True


def spark_options(args: list[str]) -> dict[str, str]:
    """``tiered-kafka`` reader options equal to the CLI arguments ``args``."""
    valued = [a for a in args if a != "--s3-path-style"]
    flags = dict(zip(valued[::2], valued[1::2], strict=True))
    path_style = {"s3.pathStyle": "true"} if "--s3-path-style" in args else {}
    names = {
        "--store": "store",
        "--key-prefix": "keyPrefix",
        "--key-pair": "keyPairs",
        "--s3-endpoint-url": "s3.endpointUrl",
        "--s3-region": "s3.region",
    }
    return {names[k]: v for k, v in flags.items()} | path_style


def spark_checks(
    bucket: Bucket, args: list[str], report: Report, work: Path, run: SparkRun
) -> None:
    """:mod:`tests.realkafka.spark_checks` on ``bucket``, in the process :class:`SparkRun`
    starts for every bucket; returns once its verdicts are in a report."""
    oracles = {}
    for topic in bucket.topics:
        record = json.loads((bucket.folder / "oracle" / f"{topic}.spark.json").read_text())
        for part in record.values():  # Spark's Kafka source's batch and stream
            part["rows"] = [
                r for r in part["rows"] if r["offset"] < bucket.remote_end(topic, r["partition"])
            ]
        for isolation in ("read_uncommitted", "read_committed"):  # the Java consumer's epochs
            record[f"epochs_{isolation}"] = [
                {
                    "partition": r["partition"],
                    "offset": r["offset"],
                    "leaderEpoch": r["leaderEpoch"],
                }
                for r in bucket.oracle(topic, "java", isolation)
            ]
        oracles[topic] = record
    spec = work / f"spark-{bucket.name}.json"
    spec.write_text(
        json.dumps(
            {
                "name": bucket.name,
                "options": spark_options(args),
                "cli": args,
                "oracles": oracles,
                "segments": len(bucket.segments),
                # The stream and the two exports read through the same source as the batch
                # reads: on the S3 copy of the same topics only the batch reads and the scrub
                # (what the store changes); the stream and export over S3 are tests/spark/test_s3.py
                "full": bucket.settings["store"] != "s3",
            }
        )
    )
    run.check(bucket.name, spec, report)


class SparkRun:
    """Every bucket's Spark checks in one process (one SparkSession, one JVM for all). Each
    bucket's thread hands its spec in while its store is up, or leaves; the last to arrive runs
    the process, records every bucket's verdicts in its report, and lets the others go on."""

    def __init__(self, buckets: set[str]) -> None:
        self._waiting = set(buckets)
        self._specs: list[Path] = []
        self._ran = False
        self._cond = threading.Condition()

    def check(self, bucket: str, spec: Path, report: Report) -> None:
        with self._cond:
            self._specs.append(spec)
        self._arrive(bucket, report)

    def leave(self, bucket: str, report: Report) -> None:
        """``bucket`` hands no spec in (or already has): nobody waits for it."""
        self._arrive(bucket, report)

    def _arrive(self, bucket: str, report: Report) -> None:
        with self._cond:
            if bucket not in self._waiting:
                return
            self._waiting.discard(bucket)
            last = not self._waiting
        if not last:
            with self._cond:
                self._cond.wait_for(lambda: self._ran, timeout=SPARK_TIMEOUT_S + 60)
            return
        try:
            if self._specs:
                _run_spark_checks(self._specs, report)
        finally:
            with self._cond:
                self._ran = True
                self._cond.notify_all()


SPARK_TIMEOUT_S = 900


def _run_spark_checks(specs: list[Path], report: Report) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.realkafka.spark_checks", *map(str, specs)],
        capture_output=True,
        text=True,
        check=False,
        timeout=SPARK_TIMEOUT_S,
    )
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for v in verdicts:
        if "error" in v:
            report.fail(v["name"], v["error"])
        else:
            report.compare(v["name"], v["surface"], v["topic"], v["want"], v["got"])
    if done.returncode != 0 or not verdicts:
        names = ", ".join(p.stem for p in specs)
        report.fail(f"{names} spark checks", f"exit {done.returncode}: {done.stderr[-1500:]}")
