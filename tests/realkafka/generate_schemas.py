"""Write the schema-registry bucket ``tests/fixtures/real_kafka/schemas``: records framed by
Confluent's own serializers (Avro, Protobuf, JSON Schema, a mix) tiered by a real broker and the
real Aiven plugin, and what Kafka reads back from them through the plugin, decoded by Confluent's
own deserializers (``python -m tests.realkafka.generate_schemas --plugin-dir DIR``).

One broker (:class:`tests.realkafka.broker.Broker`) with the plugin's filesystem backend,
``chunk.size`` 1024 (the segments are 1.0 to 3.4 KB: 2 to 4 chunks each), zstd compression on
every chunk and encryption with the fixtures' ``k28`` key pair; the test registry
(:mod:`tests.fixtures.registry`); the topics of :data:`TOPICS`, written by librdkafka in rounds
(a segment roll and another producer codec between rounds) with
:class:`tests.fixtures.confluent_payloads.Payloads`; once every segment is tiered and deleted
locally, every partition read by librdkafka's consumer through the broker, and the oracle: per
partition an NDJSON of the bytes read and :class:`tests.fixtures.confluent_payloads.Oracle`'s
reading of them in the formats of :data:`FORMATS`. The registry's registrations are kept
(``registrations.json``) so that the checks' registry gives the same ids.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where it is typed (cimpl.pyi)
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.fixtures.confluent_payloads import Oracle, Payloads, Record
from tests.fixtures.registry import registry_process
from tests.realkafka.broker import Broker
from tests.realkafka.generate import (
    FIXTURES,
    FS_BACKEND,
    Bucket,
    Store,
    delete_locally,
    encryption,
    key_pair,
    roll_pause,
    wait_uploaded,
)
from tests.realkafka.jars import kafka_libs, kafka_version
from tests.realkafka.java import JavaTools
from tests.realkafka.oracle import librdkafka_read
from tests.realkafka.produce import topic_settings

PLUGIN_COMMIT = "3faec8690cfe02155ff581d06ec62c7bcc1b6a81"  # v1.0.0 (README.md there)
TOPICS = {"avro": 2, "protobuf": 1, "jsonschema": 1, "mixed": 1}  # topic -> partitions
COUNTS = {"avro": 240, "protobuf": 180, "jsonschema": 150, "mixed": 180}
FORMATS = {  # topic -> (key_format, value_format) of the oracle (and of the checks)
    "avro": ("avro", "avro"),
    "protobuf": ("string", "protobuf"),
    "jsonschema": ("string", "jsonschema"),
    "mixed": ("auto", "auto"),
}
ROUND_CODECS = ("none", "zstd", "none", "lz4", "gzip", "snappy")  # a segment per round
SEED = 2024


def rsm_settings(private: Path, public: Path, store_root: Path) -> dict[str, str]:
    return {
        "storage.backend.class": FS_BACKEND,
        "storage.root": str(store_root),
        "chunk.size": "1024",
        "compression.enabled": "true",
        "compression.heuristic.enabled": "false",
        **encryption(private, public),
    }


def payloads(registry: str) -> dict[str, list[tuple[int, Record]]]:
    """Per topic, (partition, (key, value)) in the order written; the avro topic's second
    schema version from its half on, its records on both partitions by turns."""
    made = Payloads(SchemaRegistryClient({"url": registry}))
    out: dict[str, list[tuple[int, Record]]] = {}
    for n, topic in enumerate(TOPICS):
        count = COUNTS[topic]
        v2_from = count // 2 if topic == "avro" else None
        records = made.records(topic, topic, count, SEED + n, v2_from)
        out[topic] = [(i % TOPICS[topic], r) for i, r in enumerate(records)]
    return out


def produce(bootstrap: str, records: dict[str, list[tuple[int, Record]]]) -> None:
    """A share of every topic's records each round, flushed in groups of 1 to 16 (batches of
    several sizes), another codec each round, a segment roll between rounds."""
    rng = random.Random(SEED)
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    rounds = len(ROUND_CODECS)
    for n, codec in enumerate(ROUND_CODECS):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 50,
                "compression.codec": codec,
                "enable.idempotence": n % 2 == 0,
                "on_delivery": delivered,
            }
        )
        for topic, rows in records.items():
            share = rows[len(rows) * n // rounds : len(rows) * (n + 1) // rounds]
            left = rng.randrange(1, 17)  # records until the next flush
            for partition, (key, value) in share:
                producer.produce(topic, value=value, key=key, partition=partition)
                left -= 1
                if not left:
                    producer.flush(30)
                    left = rng.randrange(1, 17)
            if producer.flush(60):
                raise RuntimeError(f"{topic}: not delivered in 60 s")
        roll_pause()
    if failures:
        raise RuntimeError(f"deliveries failed: {failures[:5]}")


def wait_all_remote(broker: Broker, ends: dict[tuple[str, int], int]) -> None:
    """Until each partition's only local segment is the empty one starting at its end (the
    active segment of the writes expired, rolled and tiered: every record read is remote)."""
    deadline = time.monotonic() + 120.0
    while True:
        left = {
            (t, p): sorted(int(s.stem) for s in (broker.log_dir / f"{t}-{p}").glob("*.log"))
            for t, p in ends
        }
        if all(bases == [ends[tp]] for tp, bases in left.items()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not all remote: local segments {left}, ends {ends}")
        time.sleep(0.5)


def end_offsets(bootstrap: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1]
            for t, n in TOPICS.items()
            for p in range(n)
        }
    finally:
        consumer.close()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def write_oracle(bootstrap: str, registry: str, out: Path) -> dict[tuple[str, int], int]:
    """Per partition, ``<topic>-<partition>.ndjson``: what librdkafka's consumer reads through
    the broker and what Confluent's deserializers read from it; the partitions' end offsets."""
    reader = Oracle(SchemaRegistryClient({"url": registry}))
    out.mkdir(parents=True, exist_ok=True)
    ends: dict[tuple[str, int], int] = {}
    for topic, partitions in TOPICS.items():
        rows = librdkafka_read(bootstrap, topic, partitions, "read_uncommitted")
        key_format, value_format = FORMATS[topic]
        for p in range(partitions):
            lines = []
            for r in (r for r in rows if r["partition"] == p):
                key = None if r["key"] is None else base64.b64decode(r["key"])
                value = None if r["value"] is None else base64.b64decode(r["value"])
                key_json, key_id = reader.read(topic, "key", key_format, key)
                value_json, value_id = reader.read(topic, "value", value_format, value)
                row = {
                    "offset": r["offset"],
                    "key_b64": _b64(key),
                    "value_b64": _b64(value),
                    "key": key_json,
                    "value": value_json,
                    "key_schema_id": key_id,
                    "value_schema_id": value_id,
                }
                lines.append(json.dumps(row, sort_keys=True, allow_nan=False) + "\n")
            (out / f"{topic}-{p}.ndjson").write_text("".join(lines))
            offsets = [r["offset"] for r in rows if r["partition"] == p]
            ends[(topic, p)] = 1 + max(offsets, default=-1)
    return ends


def generate(work: Path, plugin_dir: Path, out: Path, plugin_commit: str) -> None:
    private, public = key_pair(FIXTURES / "keys")
    store_root = work / "schemas-store"
    rsm = rsm_settings(private, public, store_root)
    store = Store(Bucket("schemas", [rsm]), store_root, "http://127.0.0.1:1")  # no S3 used
    libs = kafka_libs()
    java = JavaTools(libs, work / "classes")
    broker = Broker(libs, work / "schemas-broker", plugin_dir, rsm)
    with registry_process(work / "registry.log") as (_, registry):
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topics = [NewTopic(t, n, 1, config=topic_settings({})) for t, n in TOPICS.items()]
            broker.create_topics(topics)
            produce(broker.bootstrap, payloads(registry))
            wait_uploaded(broker, store, TOPICS)
            delete_locally(admin, broker, TOPICS)
            ends = end_offsets(broker.bootstrap)
            wait_all_remote(broker, ends)  # the local log holds nothing: reads go to the plugin
            shutil.rmtree(out, ignore_errors=True)
            if write_oracle(broker.bootstrap, registry, out / "oracle") != ends:
                raise RuntimeError(f"the oracle's reads did not end at {ends}")
            java.run("rlmm", broker.bootstrap, str(out / "oracle" / "remote_log_metadata.ndjson"))
            store.copy_to(out / "bucket")
        except BaseException:
            print(broker.tail(60), file=sys.stderr)
            raise
        finally:
            broker.close()
        registrations = httpx.get(f"{registry}/_registrations", timeout=30).json()
    (out / "registrations.json").write_text(json.dumps(registrations, indent=1) + "\n")
    settings = {
        "kafka": kafka_version(),
        "plugin_commit": plugin_commit,
        "key_prefix": "",
        "store": "filesystem",
        "phases": [rsm],
        "topics": {t: {"partitions": n, **topic_settings({})} for t, n in TOPICS.items()},
        "records": COUNTS,
        "round_codecs": list(ROUND_CODECS),
        "formats": {t: {"key": k, "value": v} for t, (k, v) in FORMATS.items()},
    }
    text = json.dumps(settings, indent=1, sort_keys=True).replace(str(work.resolve()), "<work>")
    text = text.replace(str(FIXTURES.resolve()), "<fixtures>")
    (out / "settings.json").write_text(text + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--plugin-commit", default=PLUGIN_COMMIT)
    parser.add_argument("--work", type=Path, default=Path("build/real-kafka/generate-schemas"))
    parser.add_argument("--out", type=Path, default=FIXTURES / "schemas")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    started = time.monotonic()
    generate(args.work.resolve(), args.plugin_dir, args.out, args.plugin_commit)
    print(f"schemas: {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
