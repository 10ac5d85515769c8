"""``serve --kafka-listener``: real Kafka consumers nobody here wrote read the end-to-end bucket.

A real ``serve`` process on the bucket whose batches all come from independent encoders
(:mod:`tests.integration.independent_bucket`: every codec and chunk transform, transactions,
three leader epochs, a re-upload), with the Kafka listener on a free loopback port.
kafka-python's ``KafkaConsumer``, aiokafka's ``AIOKafkaConsumer`` and confluent-kafka's
(librdkafka) ``Consumer`` ``assign()`` each partition, seek to its beginning and read to the
remote end in both isolation levels, with two ``fetch.max.bytes`` /
``max.partition.fetch.bytes`` settings each; what they return must equal what was written
(offsets, timestamps and their types, keys, values, headers). ``offsets_for_times`` must equal
a brute-force search over the written timestamps.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from gateway.storage.filesystem import FilesystemStore
from tests.integration.independent_bucket import (
    IndependentBucket,
    WrittenPartition,
    upload_all,
    write_independent_bucket,
)
from tests.integration.kafka_clients import client_record, guard, rd_read, want
from tests.integration.serve import run_serve, spawn_serve, stop, wait_for_log

SIZES: Final = [(1, 1), (64 * 1024, 16 * 1024)]  # (fetch.max.bytes, max.partition.fetch.bytes)
RD_SIZES: Final = [(1000, 1), (64 * 1024, 16 * 1024)]  # librdkafka's smallest fetch.max.bytes
ISOLATION: Final = ["read_uncommitted", "read_committed"]
_LISTENING: Final = re.compile(rb"Kafka listener on 127\.0\.0\.1:(\d+)")


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> IndependentBucket:
    root = tmp_path_factory.mktemp("kafka-listener")
    written = write_independent_bucket(root)
    (root / "bucket").mkdir()
    asyncio.run(upload_all(FilesystemStore(root / "bucket"), written))
    return written


def _start(
    bucket: IndependentBucket, log_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], int]:
    """``serve`` with the Kafka listener on port 0 (and ``extra`` arguments); the process and
    the listener's port (from its log line), once its first bucket scan is done (a Metadata
    answer lists the topics)."""
    args = bucket.serve_args((bucket.root / "bucket").as_uri())
    proc = spawn_serve(
        [*args, "--workers", "1", "--port", "0", "--kafka-listener", "127.0.0.1:0",
         "--rescan-interval-s", "0", "--log-level", "info", *extra],
        log_path,
    )  # fmt: skip
    found = wait_for_log(proc, log_path, _LISTENING, until=lambda m: bool(_topics(int(m[1]))))
    return proc, int(found[1])


def _topics(port: int) -> list[str]:
    """The topics a Metadata v1 request (all topics) lists; none while the catalog loads."""
    body = struct.pack(">i", -1)  # topics: null = all
    header = struct.pack(">hhih", 3, 1, 1, 4) + b"test"
    frame = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        reply = _read_frame(sock)
    from kafka.protocol.metadata.metadata import MetadataResponse  # noqa: PLC0415

    response = MetadataResponse[1].decode(reply[4:], version=1)
    return [t.name for t in response.topics if t.error_code == 0]


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


@pytest.fixture(scope="module")
def listener(bucket: IndependentBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    log_path = tmp_path_factory.mktemp("kafka-listener-log") / "serve.log"
    proc, port = _start(bucket, log_path)
    try:
        yield port
    finally:
        stop(proc)


_want = want  # the name the other listener tests import


def _expected(written: WrittenPartition, isolation: str) -> list[tuple[Any, ...]]:
    records = written.committed() if isolation == "read_committed" else written.records
    return [_want(w) for w in records]


_guard = guard  # the name the other listener tests import


# --- kafka-python ---------------------------------------------------------------------------


def _kafka_python_read(
    port: int, written: WrittenPartition, isolation: str, sizes: tuple[int, int]
) -> list[tuple[Any, ...]]:
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_bytes=sizes[0],
        max_partition_fetch_bytes=sizes[1],
    )
    try:
        tp = KTopicPartition(written.topic, written.partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[tuple[Any, ...]] = []
        start = time.monotonic()
        while consumer.position(tp) < written.next_offset:
            _guard(start, f"kafka-python {written.topic}-{written.partition}")
            for r in consumer.poll(timeout_ms=500).get(tp, []):
                got.append(client_record(r))
        assert consumer.position(tp) == written.next_offset
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("isolation", ISOLATION)
def test_kafka_python_reads_every_partition_as_written(
    listener: int, bucket: IndependentBucket, isolation: str, sizes: tuple[int, int]
) -> None:
    for written in bucket.partitions.values():
        got = _kafka_python_read(listener, written, isolation, sizes)
        assert got == _expected(written, isolation), (written.topic, written.partition)


@pytest.mark.parametrize("isolation", ISOLATION)
def test_kafka_python_reads_every_partition_at_once_sharing_fetch_max_bytes(
    listener: int, bucket: IndependentBucket, isolation: str
) -> None:
    """One consumer assigned every partition: each Fetch asks for all of them, sharing a
    ``fetch.max.bytes`` smaller than one partition's share."""
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{listener}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_bytes=20_000,
        max_partition_fetch_bytes=16_384,
    )
    try:
        ends = {
            KTopicPartition(w.topic, w.partition): w.next_offset for w in bucket.partitions.values()
        }
        consumer.assign(list(ends))
        consumer.seek_to_beginning()
        got: dict[KTopicPartition, list[tuple[Any, ...]]] = {tp: [] for tp in ends}
        start = time.monotonic()
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            _guard(start, "kafka-python, every partition")
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp] += [client_record(r) for r in records]
        for w in bucket.partitions.values():
            tp = KTopicPartition(w.topic, w.partition)
            assert got[tp] == _expected(w, isolation), tp
    finally:
        consumer.close()


def test_serve_refuses_a_kafka_listener_off_loopback(bucket: IndependentBucket) -> None:
    args = bucket.serve_args((bucket.root / "bucket").as_uri())
    done = run_serve([*args, "--workers", "1", "--port", "0", "--kafka-listener", "0.0.0.0:9092"])
    assert done.returncode != 0
    assert b"loopback address only" in done.stderr + done.stdout


def _brute_force(written: WrittenPartition, ts: int) -> tuple[int, int] | None:
    """Kafka's search: the first batch (in offset order) whose max timestamp is at least
    ``ts``, then its first record at or after ``ts``; control records count."""
    for s in written.stamps:
        if s.batch_max_timestamp >= ts and s.timestamp >= ts:
            return (s.offset, s.timestamp)
    return None


def test_kafka_python_offsets_for_times_equal_a_brute_force_search(
    listener: int, bucket: IndependentBucket
) -> None:
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{listener}", group_id=None)
    try:
        for written in bucket.partitions.values():
            tp = KTopicPartition(written.topic, written.partition)
            stamps = sorted({s.timestamp for s in written.stamps})
            probes = [stamps[0] - 1, *stamps[:: max(1, len(stamps) // 25)], stamps[-1] + 1]
            for ts in probes:
                found = consumer.offsets_for_times({tp: ts})[tp]
                got = None if found is None else (found.offset, found.timestamp)
                assert got == _brute_force(written, ts), (written.topic, written.partition, ts)
            assert consumer.beginning_offsets([tp]) == {tp: 0}
            assert consumer.end_offsets([tp]) == {tp: written.next_offset}
    finally:
        consumer.close()


# --- aiokafka -------------------------------------------------------------------------------


async def _aiokafka_read(
    port: int, written: WrittenPartition, isolation: str, sizes: tuple[int, int]
) -> list[tuple[Any, ...]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_bytes=sizes[0],
        max_partition_fetch_bytes=sizes[1],
    )
    await consumer.start()
    try:
        tp = TopicPartition(written.topic, written.partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[tuple[Any, ...]] = []
        start = time.monotonic()
        while await consumer.position(tp) < written.next_offset:
            _guard(start, f"aiokafka {written.topic}-{written.partition}")
            batch = await consumer.getmany(tp, timeout_ms=500)
            for r in batch.get(tp, []):
                got.append(client_record(r))
        assert await consumer.position(tp) == written.next_offset
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("isolation", ISOLATION)
def test_aiokafka_reads_every_partition_as_written(
    listener: int, bucket: IndependentBucket, isolation: str, sizes: tuple[int, int]
) -> None:
    for written in bucket.partitions.values():
        got = asyncio.run(_aiokafka_read(listener, written, isolation, sizes))
        assert got == _expected(written, isolation), (written.topic, written.partition)


# --- confluent-kafka (librdkafka) -----------------------------------------------------------


def _confluent_read(
    port: int, written: WrittenPartition, isolation: str, sizes: tuple[int, int]
) -> list[tuple[Any, ...]]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "kafka-listener-test",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "message.max.bytes": 1000,  # fetch.max.bytes may not be below it
            "fetch.max.bytes": sizes[0],
            "max.partition.fetch.bytes": sizes[1],
        }
    )
    try:
        return rd_read(consumer, written.topic, written.partition, written.next_offset)
    finally:
        consumer.close()


@pytest.mark.parametrize("sizes", RD_SIZES)
@pytest.mark.parametrize("isolation", ISOLATION)
def test_confluent_kafka_reads_every_partition_as_written(
    listener: int, bucket: IndependentBucket, isolation: str, sizes: tuple[int, int]
) -> None:
    for written in bucket.partitions.values():
        got = _confluent_read(listener, written, isolation, sizes)
        assert got == _expected(written, isolation), (written.topic, written.partition)


def test_confluent_kafka_offsets_for_times_equal_a_brute_force_search(
    listener: int, bucket: IndependentBucket
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{listener}", "group.id": "kafka-listener-test"}
    )
    try:
        for written in bucket.partitions.values():
            stamps = sorted({s.timestamp for s in written.stamps})
            probes = [stamps[0] - 1, *stamps[:: max(1, len(stamps) // 10)], stamps[-1] + 1]
            for ts in probes:
                asked = confluent_kafka.TopicPartition(written.topic, written.partition, ts)
                (found,) = consumer.offsets_for_times([asked], timeout=30)
                assert found.error is None
                want = _brute_force(written, ts)
                # librdkafka says "no such offset" with the end offset (-1 on the wire)
                assert found.offset == (want[0] if want else -1), (written.topic, ts)
            low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(written.topic, written.partition), timeout=30
            )
            assert (low, high) == (0, written.next_offset)
    finally:
        consumer.close()


def test_a_principal_over_its_rate_is_throttled_and_reads_exactly(
    bucket: IndependentBucket, tmp_path: Path
) -> None:
    """``rate_limit_per_s`` counts Kafka requests: a kafka-python consumer at 20 requests a
    second (fetches of one small batch each) is held back, reads every record exactly, and
    ``/metrics`` counts the held Fetch requests."""
    log_path = tmp_path / "serve.log"
    proc, port = _start(bucket, log_path, "--rate-limit-per-s", "20", "--rate-limit-burst", "2")
    try:
        written = max(bucket.partitions.values(), key=lambda w: w.next_offset)
        got = _kafka_python_read(port, written, "read_uncommitted", SIZES[0])
        assert got == _expected(written, "read_uncommitted")
        found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log_path.read_text())
        assert found
        metrics = _metrics_text(int(found.group(1)))
        held = re.search(r'tiered_gateway_kafka_throttled_requests_total\{api="Fetch"\} (\S+)',
                         metrics)  # fmt: skip
        assert held and float(held.group(1)) > 0, metrics[-2000:]
    finally:
        stop(proc)


def _metrics_text(http_port: int) -> str:
    """``/metrics``, asked again while the shared budget answers 429 (the same anonymous
    principal's HTTP requests count against the rate too)."""
    start = time.monotonic()
    while True:
        guard(start, "/metrics")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            time.sleep(float(exc.headers.get("Retry-After", "1")))


def test_garbage_and_a_vanished_client_leave_the_listener_serving(
    listener: int, bucket: IndependentBucket
) -> None:
    for junk in (b"\x00\x00\x00\x0cnot a request", struct.pack(">i", 1 << 30), b"\xff" * 8):
        with socket.create_connection(("127.0.0.1", listener), timeout=10) as sock:
            sock.sendall(junk)
            assert sock.recv(1) == b""  # closed by the listener
    with socket.create_connection(("127.0.0.1", listener), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)  # a frame begun, then gone
    assert sorted(_topics(listener)) == sorted({t for t, _ in bucket.partitions})
    written = next(iter(bucket.partitions.values()))
    got = _kafka_python_read(listener, written, "read_uncommitted", SIZES[1])
    assert got == _expected(written, "read_uncommitted")
