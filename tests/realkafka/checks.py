"""Every surface of the gateway against what Kafka itself read from the same buckets
(``tests/fixtures/real_kafka``, written by :mod:`tests.realkafka.generate`).

Per bucket: ``serve`` (HTTP and the Kafka listener) on the bucket as the plugin wrote it (S3
buckets are put back on a moto server), then: the HTTP JSON, NDJSON and raw walks and
ListOffsets; the listener read by the Java consumer (with ``offsetsForTimes``) and by
librdkafka; ``catalog`` against the ``__remote_log_metadata`` records; the Spark source,
``export`` and ``scrub`` (:mod:`tests.realkafka.spark_checks`); ``dump`` against Kafka's
DumpLogSegments; and the raw bytes against the broker's own segment files.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx

from tests.fixtures.ports import LOCALHOST, free_port, listening_port
from tests.integration.serve import serve_process
from tests.realkafka import dumps, surfaces
from tests.realkafka.jars import CACHE, kafka_libs
from tests.realkafka.java import JavaTools
from tests.realkafka.oracle import ISOLATIONS, librdkafka_read, load_ndjson
from tests.realkafka.report import Report, Row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_kafka"


class Bucket:
    """One fixture bucket and its oracles."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.name = folder, folder.name
        self.settings = json.loads((folder / "settings.json").read_text())
        self.topics: dict[str, int] = {
            t: s["partitions"] for t, s in self.settings["topics"].items()
        }
        self.rlmm = load_ndjson(folder / "oracle" / "remote_log_metadata.ndjson")
        self.segments = self._segments()

    def _segments(self) -> dict[str, dict[str, Any]]:
        """The segments COPY_SEGMENT_FINISHED by the broker, by id, with their metadata."""
        by_id = {
            m["segmentId"]: dict(m) for m in self.rlmm if m["type"] == "RemoteLogSegmentMetadata"
        }
        for m in self.rlmm:
            if m["type"] == "RemoteLogSegmentMetadataUpdate":
                by_id[m["segmentId"]]["state"] = m["state"]
        return {k: v for k, v in by_id.items() if v["state"] == "COPY_SEGMENT_FINISHED"}

    def remote_end(self, topic: str, partition: int) -> int:
        ends = [
            s["endOffset"]
            for s in self.segments.values()
            if (s["topic"], s["partition"]) == (topic, partition)
        ]
        return max(ends) + 1

    def oracle(self, topic: str, client: str, isolation: str) -> list[Row]:
        rows = load_ndjson(self.folder / "oracle" / f"{topic}.{client}.{isolation}.ndjson")
        return [r for r in rows if r["offset"] < self.remote_end(topic, r["partition"])]

    def offsets(self, topic: str) -> dict[str, Any]:
        return json.loads((self.folder / "oracle" / f"{topic}.offsets.json").read_text())


@contextlib.contextmanager
def store_of(bucket: Bucket, key: Path) -> Iterator[list[str]]:
    """The arguments that open the bucket (its folder, or an S3 bucket on moto) with ``key``."""
    keys = ["--key-pair", f"k28={key}"]
    prefix = (
        ["--key-prefix", bucket.settings["key_prefix"]] if bucket.settings["key_prefix"] else []
    )
    if bucket.settings["store"] != "s3":
        yield ["--store", f"file://{bucket.folder / 'bucket'}", *prefix, *keys]
        return
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOCALHOST, "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://{LOCALHOST}:{listening_port(moto, timeout_s=60)}"
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        s3.create_bucket(Bucket="real-kafka")
        root = bucket.folder / "bucket"
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            s3.upload_file(str(path), "real-kafka", str(path.relative_to(root)))
        yield [
            "--store",
            "s3://real-kafka",
            "--s3-endpoint-url",
            endpoint,
            "--s3-region",
            "us-east-1",
            *prefix,
            *keys,
        ]
    finally:
        moto.terminate()
        moto.wait()


def private_key(work: Path) -> Path:
    """The fixtures' private key, copied with mode 0600 (git keeps 0644; serve refuses it)."""
    key = work / "k28-private.pem"
    key.write_bytes((FIXTURES / "keys" / "k28-private.pem").read_bytes())
    key.chmod(0o600)
    return key


def check_bucket(bucket: Bucket, java: JavaTools, report: Report, work: Path) -> None:
    dumps.prepare(bucket, java)
    kafka_port = free_port()
    with store_of(bucket, private_key(work)) as args:
        listener = ["--kafka-listener", f"{LOCALHOST}:{kafka_port}"]
        with (
            serve_process([*args, *listener], work / f"serve-{bucket.name}.log") as url,
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            for topic, partitions in bucket.topics.items():
                http_checks(bucket, client, topic, partitions, report)
                listener_checks(
                    bucket, java, f"{LOCALHOST}:{kafka_port}", topic, partitions, report, work
                )
        catalog_checks(bucket, args, report)
        spark_checks(bucket, args, report, work)
    dumps.checks(bucket, java, report)


def _guarded(report: Report, name: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        report.fail(name, f"{type(e).__name__}: {str(e)[:300]}")
        return None


def http_checks(
    bucket: Bucket, client: httpx.Client, topic: str, partitions: int, report: Report
) -> None:
    for isolation in ISOLATIONS:
        want = bucket.oracle(topic, "java", isolation)
        for surface, walk in (
            ("http-json", surfaces.json_walk),
            ("http-ndjson", surfaces.ndjson_walk),
        ):
            name = f"{bucket.name}/{topic} {surface} {isolation} = Java consumer"
            got = _guarded(
                report,
                name,
                lambda w=walk, i=isolation: [
                    r for p in range(partitions) for r in w(client, topic, p, i)
                ],
            )
            if got is not None:
                report.compare(name, surface, f"{bucket.name}/{topic}", want, got)
    name = f"{bucket.name}/{topic} http-raw read_uncommitted = Java consumer"
    raw = _guarded(
        report, name, lambda: {p: surfaces.raw_walk(client, topic, p) for p in range(partitions)}
    )
    if raw is not None:
        got = [r for p in range(partitions) for r in surfaces.raw_rows(p, raw[p])]
        report.compare(
            name,
            "http-raw",
            f"{bucket.name}/{topic}",
            bucket.oracle(topic, "java", "read_uncommitted"),
            got,
        )
        for p in range(partitions):
            local = dumps.local_log_bytes(bucket, topic, p)
            diffs = (
                []
                if raw[p] == local
                else [
                    f"{len(raw[p])} bytes served, the broker's segment files hold {len(local)}; "
                    f"first difference at byte {_first_diff(raw[p], local)}"
                ]
            )
            report.verdict(
                f"{bucket.name}/{topic}-{p} http-raw bytes = the broker's segment files", diffs
            )
    offsets_checks(bucket, client, topic, partitions, report)


def _first_diff(a: bytes, b: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def expected_times(bucket: Bucket, topic: str) -> list[Row]:
    """offsetsForTimes as the broker answered it, but for the remote tier alone: an answer in the
    (never tiered) active segment is none there."""
    rows = []
    for p, part in sorted(bucket.offsets(topic)["partitions"].items(), key=lambda kv: int(kv[0])):
        end = bucket.remote_end(topic, int(p))
        for ts, hit in sorted(part["times"].items(), key=lambda kv: int(kv[0])):
            keep = hit is not None and hit["offset"] < end
            rows.append(
                {
                    "partition": int(p),
                    "target": int(ts),
                    "offset": hit["offset"] if keep else None,
                    "timestamp": hit["timestamp"] if keep else None,
                    "leaderEpoch": hit["leaderEpoch"] if keep else None,
                }
            )
    return rows


def offsets_checks(
    bucket: Bucket, client: httpx.Client, topic: str, partitions: int, report: Report
) -> None:
    want = expected_times(bucket, topic)
    got = []
    for row in want:
        r = client.get(
            f"/v1/topics/{topic}/partitions/{row['partition']}/offsets",
            params={"timestamp": row["target"]},
        ).json()
        hit = r.get("offset", -2) >= 0
        got.append(
            {
                "partition": row["partition"],
                "target": row["target"],
                "offset": r["offset"] if hit else None,
                "timestamp": r["timestamp"] if hit else None,
                "leaderEpoch": r.get("leader_epoch") if hit else None,
            }
        )
    report.compare(
        f"{bucket.name}/{topic} http ListOffsets by timestamp = offsetsForTimes",
        "http-offsets",
        f"{bucket.name}/{topic}",
        want,
        got,
    )
    admin = bucket.offsets(topic)["admin"]
    want_ends, got_ends = [], []
    for p in range(partitions):
        end = bucket.remote_end(topic, p)
        earliest = admin[str(p)]["earliest"]
        want_ends += [
            {"partition": p, "spec": "earliest", "offset": earliest["offset"]},
            {"partition": p, "spec": "latest", "offset": end},
            {"partition": p, "spec": "latest read_committed", "offset": end},
            {"partition": p, "spec": "max_timestamp", **dumps.max_timestamp(bucket, topic, p)},
        ]
        for spec, params in (
            ("earliest", {"timestamp": "earliest"}),
            ("latest", {"timestamp": "latest"}),
            ("latest read_committed", {"timestamp": "latest", "isolation_level": "read_committed"}),
            ("max_timestamp", {"timestamp": "max_timestamp"}),
        ):
            r = client.get(f"/v1/topics/{topic}/partitions/{p}/offsets", params=params).json()
            row = {"partition": p, "spec": spec, "offset": r.get("offset")}
            if spec == "max_timestamp":
                row["timestamp"] = r.get("timestamp")
            got_ends.append(row)
    report.compare(
        f"{bucket.name}/{topic} http ListOffsets earliest/latest/max_timestamp"
        " = broker, DumpLogSegments",
        "http-offsets",
        f"{bucket.name}/{topic}",
        want_ends,
        got_ends,
    )


def listener_checks(
    bucket: Bucket,
    java: JavaTools,
    bootstrap: str,
    topic: str,
    partitions: int,
    report: Report,
    work: Path,
) -> None:
    for isolation in ISOLATIONS:
        want = bucket.oracle(topic, "java", isolation)
        out = work / f"{bucket.name}-{topic}-{isolation}.ndjson"
        name = f"{bucket.name}/{topic} listener {isolation}: Java consumer"
        if (
            _guarded(report, name, java.run, "consume", bootstrap, topic, isolation, str(out))
            is not None
        ):
            report.compare(name, "listener-java", f"{bucket.name}/{topic}", want, load_ndjson(out))
        name = f"{bucket.name}/{topic} listener {isolation}: librdkafka"
        got = _guarded(report, name, librdkafka_read, bootstrap, topic, partitions, isolation)
        if got is not None:
            report.compare(
                name,
                "listener-librdkafka",
                f"{bucket.name}/{topic}",
                bucket.oracle(topic, "librdkafka", isolation),
                got,
            )
    want = expected_times(bucket, topic)
    out = work / f"{bucket.name}-{topic}-offsets.json"
    name = f"{bucket.name}/{topic} listener offsetsForTimes: Java consumer"
    stamps = sorted({str(r["target"]) for r in want}, key=int)
    if _guarded(report, name, java.run, "offsets", bootstrap, topic, str(out), *stamps) is not None:
        answered = json.loads(out.read_text())["partitions"]
        got = [
            {
                "partition": r["partition"],
                "target": r["target"],
                **_hit(answered[str(r["partition"])]["times"].get(str(r["target"]))),
            }
            for r in want
        ]
        report.compare(name, "listener-offsets", f"{bucket.name}/{topic}", want, got)


def _hit(hit: dict[str, Any] | None) -> dict[str, Any]:
    if hit is None:
        return {"offset": None, "timestamp": None, "leaderEpoch": None}
    return {
        "offset": hit["offset"],
        "timestamp": hit["timestamp"],
        "leaderEpoch": hit["leaderEpoch"],
    }


def catalog_checks(bucket: Bucket, args: list[str], report: Report) -> None:
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
                    *args,
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
    report.compare(name, "catalog", bucket.name, want, got)


def spark_options(args: list[str]) -> dict[str, str]:
    """``tiered-kafka`` reader options equal to the CLI arguments ``args``."""
    flags = dict(zip(args[::2], args[1::2], strict=True))
    names = {
        "--store": "store",
        "--key-prefix": "keyPrefix",
        "--key-pair": "keyPairs",
        "--s3-endpoint-url": "s3.endpointUrl",
        "--s3-region": "s3.region",
    }
    return {names[k]: v for k, v in flags.items()}


def spark_checks(bucket: Bucket, args: list[str], report: Report, work: Path) -> None:
    """:mod:`tests.realkafka.spark_checks` in a process of its own; its verdicts into ``report``."""
    oracles = {}
    for topic in bucket.topics:
        record = json.loads((bucket.folder / "oracle" / f"{topic}.spark.json").read_text())
        for part in record.values():
            part["rows"] = [
                r for r in part["rows"] if r["offset"] < bucket.remote_end(topic, r["partition"])
            ]
        oracles[topic] = record
    spec = work / f"spark-{bucket.name}.json"
    spec.write_text(
        json.dumps(
            {"name": bucket.name, "options": spark_options(args), "cli": args, "oracles": oracles}
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.realkafka.spark_checks", str(spec)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for v in verdicts:
        if "error" in v:
            report.fail(v["name"], v["error"])
        else:
            report.compare(v["name"], v["surface"], v["topic"], v["want"], v["got"])
    if done.returncode != 0 or not verdicts:
        report.fail(f"{bucket.name} spark checks", f"exit {done.returncode}: {done.stderr[-1500:]}")


def run(emit: Any = print) -> Report:
    report = Report(emit=emit)
    java = JavaTools(kafka_libs(), CACHE / "classes")
    with tempfile.TemporaryDirectory(prefix="real-kafka-") as tmp:
        for folder in sorted(p for p in FIXTURES.iterdir() if (p / "settings.json").exists()):
            try:
                check_bucket(Bucket(folder), java, report, Path(tmp))
            except Exception as e:
                report.fail(f"{folder.name} served", f"{type(e).__name__}: {str(e)[:500]}")
    return report


def main() -> None:
    report = run()
    print(report.summary())
    sys.exit(1 if report.differences else 0)


if __name__ == "__main__":
    main()
