"""What Kafka itself reads from a tiered topic, recorded once the local segments are gone (the
broker reads them through the plugin): the Java consumer in both isolation levels, offsets and
``offsetsForTimes`` for timestamps taken from the data, the Admin client's ListOffsets,
librdkafka, and the records of ``__remote_log_metadata``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.realkafka.java import JavaTools
from tests.realkafka.report import b64, compact

ISOLATIONS = ("read_uncommitted", "read_committed")
READ_TIMEOUT_S = 120.0


def load_ndjson(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sample_timestamps(records: list[dict[str, Any]]) -> list[int]:
    """Timestamps from the data: each record's of a sample, one past it, before and after all."""
    stamps = sorted({r["timestamp"] for r in records})
    picked = set(stamps[:: max(1, len(stamps) // 25)]) | {stamps[0], stamps[-1]}
    picked |= {t + 1 for t in list(picked)} | {0, stamps[-1] + 60_000}
    return sorted(picked)


def _compact_file(path: Path) -> None:
    path.write_text(
        "".join(json.dumps(compact(r), sort_keys=True) + "\n" for r in load_ndjson(path))
    )


def record(
    bootstrap: str, java: JavaTools, out: Path, topics: dict[str, Any], *, tiered: bool = True
) -> None:
    """The oracles of ``topics``; ``tiered``: the broker's ``__remote_log_metadata`` too."""
    out.mkdir(parents=True, exist_ok=True)
    if tiered:
        java.run("rlmm", bootstrap, str(out / "remote_log_metadata.ndjson"))
    for topic in topics:
        for isolation in ISOLATIONS:
            java.run(
                "consume",
                bootstrap,
                topic,
                isolation,
                str(out / f"{topic}.java.{isolation}.ndjson"),
            )
            _compact_file(out / f"{topic}.java.{isolation}.ndjson")
            rows = librdkafka_read(bootstrap, topic, topics[topic][0], isolation)
            (out / f"{topic}.librdkafka.{isolation}.ndjson").write_text(
                "".join(json.dumps(compact(r), sort_keys=True) + "\n" for r in rows)
            )
        stamps = sample_timestamps(load_ndjson(out / f"{topic}.java.read_uncommitted.ndjson"))
        java.run("offsets", bootstrap, topic, str(out / f"{topic}.offsets.json"), *map(str, stamps))


def librdkafka_read(
    bootstrap: str, topic: str, partitions: int, isolation: str
) -> list[dict[str, Any]]:
    """Every record of ``topic`` as librdkafka's consumer reads it (the rows the Java oracle
    writes, but the leader epoch, which librdkafka gives per message too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oracle",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.message.max.bytes": 8_388_608,
        }
    )
    rows: list[dict[str, Any]] = []
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"librdkafka read of {topic} not done in {READ_TIMEOUT_S:.0f} s")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                    continue
                raise RuntimeError(f"librdkafka: {msg.error()}")
            ts_type, ts = msg.timestamp()
            rows.append(
                {
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "timestamp": ts,
                    "timestampType": {1: "CreateTime", 2: "LogAppendTime"}[ts_type],
                    "key": b64(msg.key()),
                    "value": b64(msg.value()),
                    "headers": [[k, b64(v)] for k, v in msg.headers() or []],
                    "leaderEpoch": msg.leader_epoch(),
                }
            )
    finally:
        consumer.close()
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))
