"""Following ``__remote_log_metadata`` (issue 29): how fast a cold gateway catches up.

A real Kafka 4.1.1 broker (no tiering needed) holds a topic of ``--segments`` x 2 metadata
records (each segment COPY_SEGMENT_STARTED then FINISHED, ``--partitions`` user partitions,
encoded by the serde Kafka's own ``RemoteLogMetadataSerde`` agrees with). Measured, in the same
run, from the start of the topic to its end offset:

* the follower (:func:`gateway.metadata.follow.catch_up`: kafka-python's consumer, the serde,
  the KIP-405 state machine) into the in-memory catalog, and into SQLite (``--state-dir``);
* kafka-python's consumer alone (the client's share);
* librdkafka's consumer alone (confluent-kafka): the fastest Python-reachable Kafka client,
  the peer.

Records per second of wall time and per CPU-second of this process (the broker excluded).

    python -m tests.bench.bench_follow [--segments N] [--partitions N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from gateway.metadata.follow import FollowConfig, catch_up
from gateway.metadata.follow_kafka import connect
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.open import open_manager
from gateway.metadata.serde import encode_metadata_record
from tests.realkafka.broker import Broker
from tests.realkafka.jars import kafka_libs

TOPIC = "bench_remote_log_metadata"


def records(segments: int, partitions: int) -> list[bytes]:
    topic_id = uuid.UUID(int=0x29)
    out: list[bytes] = []
    for i in range(segments):
        tp = TopicIdPartition(topic_id, i % partitions, "orders")
        sid = RemoteLogSegmentId(tp, uuid.UUID(int=i + 1))
        start = (i // partitions) * 1000
        meta = RemoteLogSegmentMetadata(sid, start, start + 999, start, 1, i, ((0, start),), 10**6)
        out.append(encode_metadata_record(meta))
        update = RemoteLogSegmentMetadataUpdate(sid, i, None, SegmentState.COPY_SEGMENT_FINISHED, 1)
        out.append(encode_metadata_record(update))
    return out


def timed(fn: Callable[[], int]) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    n = fn()
    return n, time.perf_counter() - wall, time.process_time() - cpu


def librdkafka(bootstrap: str, end: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    n = 0
    while n < end:
        for msg in c.consume(10_000, 1.0):
            if not msg.error():
                n += 1
    c.close()
    return n


def kafka_python(bootstrap: str, end: int) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = KTopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek(tp, 0)
    n = 0
    while n < end:
        for batch in c.poll(timeout_ms=1000, max_records=5000).values():
            n += len(batch)
    c.close()
    return n


def follower(bootstrap: str, state: Path | None) -> int:
    rlmm = open_manager(state)
    try:
        status = catch_up(rlmm, FollowConfig(bootstrap, topic=TOPIC), connect, 600)
        return status.records
    finally:
        rlmm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    args = parser.parse_args()
    values = records(args.segments, args.partitions)
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp:
        broker = Broker(kafka_libs(), Path(tmp) / "broker", None, {})
        broker.start()
        try:
            broker.create_topics([NewTopic(TOPIC, 1, 1)])
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            for value in values:
                while True:
                    try:
                        producer.produce(TOPIC, value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.1)
            producer.flush(120)
            end = len(values)
            print(f"{end} metadata records ({args.segments} segments), {os.cpu_count()} cores")
            print(f"{'reader':<46} {'records/s':>11} {'per CPU-s':>11}")
            runs: list[tuple[str, Callable[[], int]]] = [
                ("librdkafka consumer alone (peer)", lambda: librdkafka(broker.bootstrap, end)),
                ("kafka-python consumer alone", lambda: kafka_python(broker.bootstrap, end)),
                ("follower -> in-memory catalog", lambda: follower(broker.bootstrap, None)),
                (
                    "follower -> SQLite catalog (--state-dir)",
                    lambda: follower(broker.bootstrap, Path(tempfile.mkdtemp(dir=tmp))),
                ),
            ]
            for name, fn in runs:
                n, wall, cpu = timed(fn)
                assert n == end, (name, n, end)
                print(f"{name:<46} {n / wall:>11,.0f} {n / max(cpu, 1e-9):>11,.0f}")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
