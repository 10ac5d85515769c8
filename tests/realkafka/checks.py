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
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import httpx

from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import stop
from tests.realkafka import dumps, live, surfaces
from tests.realkafka.jars import CACHE, kafka_libs
from tests.realkafka.java import JavaTools
from tests.realkafka.oracle import ISOLATIONS, librdkafka_read, load_ndjson
from tests.realkafka.report import Report, Row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_kafka"


class Bucket:
    """One bucket and its oracles: a fixture, or ``live`` (:mod:`tests.realkafka.live`: tiered
    by ``tier`` from a stopped broker's folders, no ``__remote_log_metadata``)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.name = folder, folder.name
        self.settings = json.loads((folder / "settings.json").read_text())
        self.topics: dict[str, int] = {
            t: s["partitions"] for t, s in self.settings["topics"].items()
        }
        self.live = bool(self.settings.get("live"))
        rlmm = folder / "oracle" / "remote_log_metadata.ndjson"
        self.rlmm = [] if self.live else load_ndjson(rlmm)
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
        if self.live:  # the whole log is tiered
            return int(self.offsets(topic)["partitions"][str(partition)]["end_uncommitted"])
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
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # moto's; serve, catalog, Spark
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
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
            "--s3-path-style",
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


_HTTP = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_KAFKA = re.compile(rb"Kafka listener on 127\.0\.0\.1:(\d+)")
SERVE_START_S = 120.0


@contextlib.contextmanager
def serving(args: list[str], log_path: Path) -> Iterator[tuple[str, str]]:
    """``serve`` with HTTP and the Kafka listener both on port 0 (their ports read from its
    log, never guessed); the HTTP base URL and the Kafka bootstrap once ``/readyz`` answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")}
    command = [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        *args,
        "--workers",
        "1",
        "--port",
        "0",
        "--kafka-listener",
        f"{LOCALHOST}:0",
        "--log-level",
        "info",
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + SERVE_START_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"serve exited {proc.returncode}: {log_path.read_text()[-2000:]}"
                )
            text = log_path.read_bytes()
            http, kafka = _HTTP.search(text), _KAFKA.search(text)
            if http and kafka:
                url = f"http://{LOCALHOST}:{int(http.group(1))}"
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                        break
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve not ready in {SERVE_START_S:.0f} s: {text[-2000:]!r}")
            time.sleep(0.1)
        yield url, f"{LOCALHOST}:{int(kafka.group(1))}"
    finally:
        stop(proc)


def check_bucket(bucket: Bucket, java: JavaTools, report: Report, work: Path) -> None:
    dumps.prepare(bucket, java)
    if bucket.live:
        max_timestamp_rule(bucket, report)
    with store_of(bucket, private_key(work)) as args:
        with (
            serving(args, work / f"serve-{bucket.name}.log") as (url, bootstrap),
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            for topic, partitions in bucket.topics.items():
                http_checks(bucket, client, topic, partitions, report)
                listener_checks(bucket, java, bootstrap, topic, partitions, report, work)
        if not bucket.live:
            catalog_checks(bucket, args, report, work)
            spark_checks(bucket, args, report, work)
    dumps.checks(bucket, java, report)


def max_timestamp_rule(bucket: Bucket, report: Report) -> None:
    """The rule the tiered buckets' max_timestamp expectation follows (DumpLogSegments: the
    first record of the greatest timestamp, control batches included), against the live
    broker's own answer, which it gives from local segments."""
    for topic, partitions in bucket.topics.items():
        admin = bucket.offsets(topic)["admin"]
        want = [{"partition": p, **admin[str(p)]["max_timestamp"]} for p in range(partitions)]
        got = [{"partition": p, **dumps.max_timestamp(bucket, topic, p)} for p in range(partitions)]
        report.compare(
            f"{bucket.name}/{topic} max_timestamp from DumpLogSegments = the broker's ListOffsets",
            "max-timestamp-rule",
            f"{bucket.name}/{topic}",
            want,
            got,
        )


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
    for isolation in ISOLATIONS:
        name = f"{bucket.name}/{topic} http-raw {isolation} = Java consumer"
        raw = _guarded(
            report,
            name,
            lambda i=isolation: {
                p: surfaces.raw_walk(client, topic, p, i) for p in range(partitions)
            },
        )
        if raw is None:
            continue
        aborted = isolation == "read_committed"
        got = [
            r
            for p, (data, txns) in raw.items()
            for r in surfaces.raw_rows(p, data, txns if aborted else None)
        ]
        want = bucket.oracle(topic, "java", isolation)
        report.compare(name, "http-raw", f"{bucket.name}/{topic}", want, got)
        if aborted:
            continue
        for p, (data, _) in raw.items():
            local = dumps.local_log_bytes(bucket, topic, p)
            diffs = (
                []
                if data == local
                else [
                    f"{len(data)} bytes served, the broker's segment files hold {len(local)}; "
                    f"first difference at byte {_first_diff(data, local)}"
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


def expected_times(bucket: Bucket, topic: str, times: str = "times") -> list[Row]:
    """offsetsForTimes as the broker answered it (``times``: a read_uncommitted consumer's;
    ``times_committed``: a read_committed one's), but for the remote tier alone: an answer in a
    segment never tiered is none there."""
    rows = []
    for p, part in sorted(bucket.offsets(topic)["partitions"].items(), key=lambda kv: int(kv[0])):
        end = bucket.remote_end(topic, int(p))
        for ts, hit in sorted(part[times].items(), key=lambda kv: int(kv[0])):
            keep = hit is not None and hit["offset"] < end
            rows.append({"partition": int(p), "target": int(ts), **_hit(hit if keep else None)})
    return rows


ADMIN_SPECS = (
    "earliest",
    "latest_uncommitted",
    "latest_committed",
    "earliest_local",
    "latest_tiered",
    "max_timestamp",
)


def expected_admin(bucket: Bucket, topic: str, partitions: int) -> list[Row]:
    """The broker's Admin ListOffsets answers, taken once the whole log was tiered (its log end
    is the remote log end: checked), but max_timestamp, which a 4.1 broker answers from its
    local segments only (-1 here): that one is DumpLogSegments' (the first record of the
    greatest timestamp, control batches included, and its batch's leader epoch)."""
    admin = bucket.offsets(topic)["admin"]
    specs = ADMIN_SPECS[:3] + ADMIN_SPECS[5:] if bucket.live else ADMIN_SPECS  # no tiering there
    rows = []
    for p in range(partitions):
        answers = admin[str(p)]
        if answers["latest_uncommitted"]["offset"] != bucket.remote_end(topic, p):
            raise AssertionError(f"{topic}-{p}: the broker's log end is not the remote log end")
        for spec in specs:
            hit = (
                answers[spec] if spec != "max_timestamp" else dumps.max_timestamp(bucket, topic, p)
            )
            timestamp = hit["timestamp"] if spec == "max_timestamp" else -1
            rows.append(
                {
                    "partition": p,
                    "spec": spec,
                    "offset": hit["offset"],
                    "timestamp": timestamp,
                    "leaderEpoch": hit["leaderEpoch"],
                }
            )
    return rows


_HTTP_SPECS = {
    "earliest": {"timestamp": "earliest"},
    "latest_uncommitted": {"timestamp": "latest"},
    "latest_committed": {"timestamp": "latest", "isolation_level": "read_committed"},
    "max_timestamp": {"timestamp": "max_timestamp"},
}


def offsets_checks(
    bucket: Bucket, client: httpx.Client, topic: str, partitions: int, report: Report
) -> None:
    for times, isolation in (("times", "read_uncommitted"), ("times_committed", "read_committed")):
        want = expected_times(bucket, topic, times)
        got = []
        for row in want:
            r = client.get(
                f"/v1/topics/{topic}/partitions/{row['partition']}/offsets",
                params={"timestamp": row["target"], "isolation_level": isolation},
            ).json()
            hit = r if r.get("offset", -2) >= 0 else None
            if hit is not None:
                hit = {**hit, "leaderEpoch": hit.get("leader_epoch")}
            got.append({"partition": row["partition"], "target": row["target"], **_hit(hit)})
        report.compare(
            f"{bucket.name}/{topic} http ListOffsets by timestamp {isolation} = offsetsForTimes",
            "http-offsets",
            f"{bucket.name}/{topic}",
            want,
            got,
        )
    want = [r for r in expected_admin(bucket, topic, partitions) if r["spec"] in _HTTP_SPECS]
    got = []
    for row in want:
        r = client.get(
            f"/v1/topics/{topic}/partitions/{row['partition']}/offsets",
            params=_HTTP_SPECS[row["spec"]],
        ).json()
        timestamp = r.get("timestamp") if row["spec"] == "max_timestamp" else -1
        got.append(
            {
                "partition": row["partition"],
                "spec": row["spec"],
                "offset": r.get("offset"),
                "timestamp": timestamp,
                "leaderEpoch": r.get("leader_epoch"),
            }
        )
    report.compare(
        f"{bucket.name}/{topic} http ListOffsets earliest/latest/max_timestamp"
        " = the broker's, DumpLogSegments'",
        "http-offsets",
        f"{bucket.name}/{topic}",
        want,
        got,
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
    out = work / f"{bucket.name}-{topic}-offsets.json"
    name = f"{bucket.name}/{topic} listener offsetsForTimes and Admin ListOffsets: Java clients"
    want = expected_times(bucket, topic)
    stamps = sorted({str(r["target"]) for r in want}, key=int)
    if _guarded(report, name, java.run, "offsets", bootstrap, topic, str(out), *stamps) is None:
        return
    answered = json.loads(out.read_text())
    for times in ("times", "times_committed"):
        want = expected_times(bucket, topic, times)
        got = [
            {
                "partition": r["partition"],
                "target": r["target"],
                **_hit(answered["partitions"][str(r["partition"])][times].get(str(r["target"]))),
            }
            for r in want
        ]
        report.compare(f"{name}: {times}", "listener-offsets", f"{bucket.name}/{topic}", want, got)
    bounds = ("beginning", "end_uncommitted", "end_committed")
    oracle = bucket.offsets(topic)["partitions"]
    want = [{"partition": p, **{b: oracle[str(p)][b] for b in bounds}} for p in range(partitions)]
    got = [
        {"partition": p, **{b: answered["partitions"][str(p)][b] for b in bounds}}
        for p in range(partitions)
    ]
    report.compare(
        f"{name}: beginningOffsets, endOffsets",
        "listener-offsets",
        f"{bucket.name}/{topic}",
        want,
        got,
    )
    want = expected_admin(bucket, topic, partitions)
    got = [
        {
            "partition": r["partition"],
            "spec": r["spec"],
            **{
                k: answered["admin"][str(r["partition"])][r["spec"]][k]
                for k in ("offset", "leaderEpoch")
            },
            "timestamp": answered["admin"][str(r["partition"])][r["spec"]]["timestamp"],
        }
        for r in want
    ]
    report.compare(f"{name}: Admin", "listener-offsets", f"{bucket.name}/{topic}", want, got)


def _hit(hit: dict[str, Any] | None) -> dict[str, Any]:
    if hit is None:
        return {"offset": None, "timestamp": None, "leaderEpoch": None}
    return {
        "offset": hit["offset"],
        "timestamp": hit["timestamp"],
        "leaderEpoch": hit["leaderEpoch"],
    }


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


def _check_one(folder: Path | None, java: JavaTools, work: Path) -> Report:
    """One bucket's checks; ``folder`` None: the live broker's, made first."""
    report = Report(emit=lambda _line: None)
    work.mkdir()
    try:
        if folder is None:
            try:
                folder = live.build(work, java)
            except Exception as e:
                report.fail("live broker", f"{type(e).__name__}: {str(e)[:1500]}")
                return report
        check_bucket(Bucket(folder), java, report, work)
    except Exception as e:
        report.fail(f"{work.name} served", f"{type(e).__name__}: {str(e)[:500]}")
    return report


def run(emit: Any = print, only: tuple[str, ...] = ()) -> Report:
    """Every bucket's checks (the fixtures' and the live broker's, ``only`` these names), the
    buckets side by side (each mostly waits on its servers and JVMs); each bucket's lines are
    emitted when it is done."""
    report = Report(emit=emit)
    java = JavaTools(kafka_libs(), CACHE / "classes")
    java.compile()
    folders = sorted(p for p in FIXTURES.iterdir() if (p / "settings.json").exists())
    if not folders:
        report.fail("fixtures", f"no bucket under {FIXTURES}")
        return report
    jobs: list[Path | None] = [*folders, None]
    jobs = [j for j in jobs if not only or (j.name if j else "live") in only]
    with (
        tempfile.TemporaryDirectory(prefix="real-kafka-") as tmp,
        ThreadPoolExecutor(len(jobs)) as pool,
    ):
        futures = [
            pool.submit(_check_one, j, java, Path(tmp) / (j.name if j else "live")) for j in jobs
        ]
        for future in futures:
            report.merge(future.result())
    return report


def main() -> None:
    report = run(only=tuple(sys.argv[1:]))
    print(report.summary())
    sys.exit(1 if report.differences else 0)


if __name__ == "__main__":
    main()
