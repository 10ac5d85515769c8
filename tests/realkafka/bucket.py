"""A bucket under check: a fixture written by a real broker and the real plugin, or the live
broker's (:mod:`tests.realkafka.live`); how to open it (its folder, or an S3 bucket put back on
a moto server) and ``serve`` on it with HTTP and the Kafka listener."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx

from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import spawn_serve, stop, wait_for_log
from tests.realkafka.oracle import load_ndjson
from tests.realkafka.report import Row

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
        self.dumped: dict[Path, list[Row]] = {}  # DumpLogSegments' rows of each local .log
        self.max_timestamps: dict[tuple[str, int], dict[str, int]] = {}  # by its rule

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
    proc = spawn_serve(
        [*args, "--workers", "1", "--port", "0", "--kafka-listener", f"{LOCALHOST}:0",
         "--log-level", "info"],
        log_path,
    )  # fmt: skip
    try:
        http = wait_for_log(proc, log_path, _HTTP, timeout_s=SERVE_START_S)
        url = f"http://{LOCALHOST}:{int(http[1])}"

        def ready(_: re.Match[bytes]) -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
            return False

        kafka = wait_for_log(proc, log_path, _KAFKA, until=ready, timeout_s=SERVE_START_S)
        yield url, f"{LOCALHOST}:{int(kafka.group(1))}"
    finally:
        stop(proc)
