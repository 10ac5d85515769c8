"""Issue 29: the oracles and gateway reads of the live metadata checks
(:mod:`tests.realkafka.follow_scenarios` runs them).

One broker that tiers: the gateway follows its ``__remote_log_metadata``.

One broker (Kafka's ``LocalTieredStorage`` mirrored into the Aiven layout, :mod:`.mirror`; or
the Aiven plugin itself when ``TG_AIVEN_PLUGIN_DIR`` names its folder), one ``serve`` with
``--metadata-source topic`` and a state folder, and the named checks:

* ``live-metadata``: the catalog read from the topic equals the bucket scan's; segments
  uploaded while the gateway runs are served within seconds of their FINISHED record, every
  record equal to the broker's; a restarted gateway resumes from its stored position.
* ``retention``: segments ``retention.ms`` deleted stop being served, earliest moves to the
  broker's, and what is served is what the broker's consumer reads.
* ``delete-records``: after DeleteRecords and a later upload, earliest and the first record of
  the HTTP walk, ListOffsets and the Kafka listener equal the broker's.
* ``topic-deleted``: a deleted topic is no longer listed nor served.
* ``upload-in-flight``: a segment whose copy started and never finished (the broker killed
  mid-upload) is never served, though its objects are in the bucket; after a restart its
  new upload is.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.realkafka.bucket import serving
from tests.realkafka.report import Row, b64
from tests.realkafka.surfaces import json_walk
from tests.realkafka.tiering import TieringBroker

WAIT_S = 60.0
SERVED_WITHIN_S = 30.0  # the bound of a wait, not a measurement: the report prints the time
DAY_MS = 86_400_000
PLUGIN_ENV = "TG_AIVEN_PLUGIN_DIR"


def plugin_dir() -> Path | None:
    """The Aiven plugin's folder when this machine has one (never in CI)."""
    value = os.environ.get(PLUGIN_ENV)
    return Path(value) if value else None


def broker_rows(bootstrap: str, topic: str, partition: int = 0) -> list[Row]:
    """What the broker's consumer (librdkafka) reads from the log start to the end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "follow-oracle", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        rows: list[Row] = []
        deadline = time.monotonic() + WAIT_S
        while high > low and (not rows or rows[-1]["offset"] < high - 1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: broker read not done in {WAIT_S} s")
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            offset = msg.offset() or 0
            rows.append({"offset": offset, "key": b64(msg.key()), "value": b64(msg.value())})
        return rows
    finally:
        consumer.close()


def broker_earliest(broker: TieringBroker, topic: str, partition: int = 0) -> int:
    return broker_earliest_at(broker.bootstrap, topic, partition)


def broker_earliest_at(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The low watermark (ListOffsets earliest) librdkafka reads from ``bootstrap``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "follow-oracle"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)[0])
    finally:
        consumer.close()


def gateway_rows(client: httpx.Client, topic: str, partition: int = 0) -> list[Row]:
    rows = json_walk(client, topic, partition, "read_uncommitted")
    return [{k: r[k] for k in ("offset", "key", "value")} for r in rows]


def info(client: httpx.Client, topic: str, partition: int = 0) -> dict[str, Any]:
    r = client.get(f"/v1/topics/{topic}/partitions/{partition}")
    return r.json() if r.status_code == 200 else {"status": r.status_code}


def earliest(client: httpx.Client, topic: str, partition: int = 0) -> int | None:
    r = client.get(
        f"/v1/topics/{topic}/partitions/{partition}/offsets", params={"timestamp": "earliest"}
    )
    return r.json().get("offset") if r.status_code == 200 else None


def produce_at(broker: TieringBroker, topic: str, timestamp_ms: int, n: int = 10) -> None:
    """``n`` records with CreateTime ``timestamp_ms`` (the retention check's old records)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, f"old-{i}".encode() * 20, b"old", timestamp=timestamp_ms)
    if producer.flush(30) != 0:
        raise RuntimeError("produce: records in flight after 30 s")


def wait_for(what: str, ok: Any, timeout_s: float = WAIT_S) -> float:
    """Until ``ok()`` is true; the seconds it took (bounded: a timeout raises)."""
    started = time.monotonic()
    while not ok():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def catalog_rows(args: list[str], topic: str) -> list[Row]:
    """``tiered-gateway catalog <args> --json``: the partition rows of ``topic``."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "catalog", *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"catalog {args[0]}: exit {done.returncode}: {done.stderr[-800:]}")
    keep = ("partition", "segments", "remote_log_start_offset", "remote_log_end_offset")
    rows = json.loads(done.stdout)["partitions"]
    return [
        {k: r[k] for k in (*keep, "size", "leader_epochs")} for r in rows if r["topic"] == topic
    ]


@contextlib.contextmanager
def gateway(
    bucket: Path,
    broker: TieringBroker,
    state: Path,
    log: Path,
    *,
    source: str = "topic",
    layout: str = "aiven",
) -> Iterator[tuple[httpx.Client, str]]:
    """``serve`` over ``bucket`` (its catalog from ``broker``'s metadata topic, or a bucket
    scan with ``source`` bucket): an HTTP client and the Kafka listener's bootstrap, once
    ready (caught up)."""
    args = ["--store", f"file://{bucket}", "--state-dir", str(state), "--rescan-interval-s", "0"]
    args += ["--layout", layout, "--metadata-source", source]
    if source != "bucket":
        args += ["--metadata-bootstrap", broker.bootstrap]
    with serving(args, log) as (url, bootstrap), httpx.Client(base_url=url, timeout=60) as c:
        yield c, bootstrap


def exported_offsets(bucket: Path, topic: str, out: Path, *extra: str) -> list[int]:
    """``tiered-gateway export`` (the Spark source, Parquet) of ``topic``: its offsets."""
    import pyarrow.parquet as pq  # noqa: PLC0415 (the spark extra)

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    command = [sys.executable, "-m", "gateway.cli", "export", "--store", f"file://{bucket}"]
    command += ["--topic", topic, "--output", str(out), "--quiet", *extra]
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"export: exit {done.returncode}: {done.stderr[-800:]}")
    return sorted(pq.read_table(out).column("offset").to_pylist())
