"""What a real Kafka broker with ``LocalTieredStorage`` writes: its files and its
``__remote_log_metadata`` records after upload, after DeleteRecords, after topic deletion, and
after a SIGKILL mid-upload; plus whether aiokafka reads ``__remote_log_metadata``.

``PYTHONPATH=. .venv/bin/python -m tests.realkafka.tiering_demo [--keep]``
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import aiokafka
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.metadata.serde import decode_metadata_record
from tests.realkafka.tiering import METADATA_TOPIC, TieringBroker, summarize

STATES = {0: "COPY_STARTED", 1: "COPY_FINISHED", 2: "DELETE_STARTED", 3: "DELETE_FINISHED"}
PARTITION_STATES = {
    0: "DELETE_PARTITION_MARKED",
    1: "DELETE_PARTITION_STARTED",
    2: "DELETE_PARTITION_FINISHED",
}


def show(broker: TieringBroker, title: str) -> None:
    print(f"\n===== {title}")
    print("-- files under remote_dir:")
    for path in broker.remote_files():
        full = broker.remote_dir / path
        print(f"   {path}{'/' if full.is_dir() else f'  ({full.stat().st_size} B)'}")
    print(f"-- {METADATA_TOPIC}:")
    for r in broker.metadata_records():
        e = summarize(r.value)
        state = (PARTITION_STATES if e.api_key == 2 else STATES)[e.state]
        seg = f" seg={e.segment_id}" if e.segment_id else ""
        rng = f" [{e.start_offset}..{e.end_offset}]" if e.start_offset is not None else ""
        print(
            f"   p{r.partition}@{r.offset} key={r.key.hex() if r.key is not None else None} "
            f"api={e.api_key} {e.topic}-{e.partition}{seg}{rng} {state}"
        )
        print(f"      value[:40]={r.value[:40].hex()} ({len(r.value)} B)")
    try:  # a cross-check of the product's own decoder on real bytes
        for r in broker.metadata_records():
            decode_metadata_record(r.value)
        print("   (gateway.metadata.serde decodes every value)")
    except Exception as exc:
        print(f"   gateway.metadata.serde FAILED: {exc!r}")


async def aiokafka_read(bootstrap: str) -> None:
    print(f"\n===== aiokafka {aiokafka.__version__} on {METADATA_TOPIC}")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(METADATA_TOPIC)
        if parts is None:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(METADATA_TOPIC)
        tps = [TopicPartition(METADATA_TOPIC, p) for p in sorted(parts or [])]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        deadline = time.monotonic() + 30
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            if time.monotonic() > deadline:
                raise TimeoutError("aiokafka: not at the end offsets after 30 s")
            batches = await consumer.getmany(timeout_ms=1000)
            got += sum(len(b) for b in batches.values())
        print(
            f"   partitions {[tp.partition for tp in tps]}, end offsets "
            f"{ {tp.partition: o for tp, o in ends.items()} }, read {got} records: OK"
        )
    finally:
        await consumer.stop()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="tiering-demo-"))
    broker = TieringBroker(work / "broker", work / "remote")
    topic = "demo-topic"
    try:
        t0 = time.monotonic()
        broker.start()
        print(f"broker on {broker.bootstrap} in {time.monotonic() - t0:.1f} s; work {work}")
        broker.create_tiered_topic(topic)
        print(f"topic {topic} id {broker.topic_id(topic)}")
        written = broker.produce_segments(topic, 3, per_segment=10)
        print("offsets per segment:", [(o[0], o[-1]) for o in written])
        t0 = time.monotonic()
        broker.wait_uploaded(topic, 3)
        print(f"3 segments uploaded {time.monotonic() - t0:.1f} s after the trailer")
        time.sleep(3)
        show(broker, "after upload")

        middle = written[1][len(written[1]) // 2]
        low = broker.delete_records(topic, 0, middle)
        print(f"\nDeleteRecords before {middle}: low watermark {low}")
        time.sleep(10)
        show(broker, f"10 s after DeleteRecords({middle})")

        try:
            asyncio.run(aiokafka_read(broker.bootstrap))
        except Exception as exc:
            print(f"   aiokafka FAILED: {type(exc).__name__}: {exc}")

        held_topic = "held-topic"
        broker.create_tiered_topic(held_topic)
        broker.produce_segments(held_topic, 1)
        broker.wait_uploaded(held_topic, 1)
        seg, took = broker.kill_mid_upload(held_topic)
        print(f"\nkilled mid-upload of segment {seg}, {took:.1f} s after the roll started")
        broker.release_uploads()
        broker.restart()
        time.sleep(15)
        show(broker, "after SIGKILL mid-upload and a restart (15 s)")

        broker.delete_topic(topic)
        broker.delete_topic(held_topic)
        time.sleep(20)
        show(broker, "20 s after deleting both topics")
    finally:
        broker.stop()
        if "-v" in sys.argv:
            print("\n--- broker log tail:\n" + broker.tail(30))
        if "--keep" not in sys.argv:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
