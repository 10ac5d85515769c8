"""The remote last stable offset: a transaction left open at the remote tail, through real clients.

A broker serves read_committed up to its last stable offset (LSO), the first offset of the
oldest open transaction, and clients take their end of partition from it: librdkafka's
``PARTITION_EOF``, ``end_offsets`` (ListOffsets LATEST with read_committed). The bucket here
has partitions whose log ends inside a transaction (its marker not tiered yet), as tiering
leaves them when a transaction spans the last copied roll:

* ``open-tail.v1`` (two partitions, plain) and ``open-tail-sealed.v2`` (zstd and AES-GCM, so
  the producer snapshot piece is decrypted): the open transaction starts in the last segment;
* ``open-span.v1``: it starts in the segment before the last (the snapshot of the tail
  segment names an offset in an earlier one).

Real clients (confluent-kafka, kafka-python, aiokafka) and the HTTP API must stop at the LSO
with read_committed (records equal to the committed ones before it, the end of partition
reached there) and read to the end with read_uncommitted. What is expected comes from the
inputs of the independent encoders (``WrittenPartition.open_from``), never from a snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType, ManifestSegmentMetadata
from gateway.remote.tiering import SegmentObjects, TieringOptions
from gateway.storage.filesystem import FilesystemStore
from tests.integration.independent_bucket import (
    KEY_ID,
    IndependentBucket,
    Shape,
    TopicSpec,
    WrittenPartition,
    upload_all,
    write_independent_bucket,
)
from tests.integration.kafka_clients import client_record, rd_record
from tests.integration.serve import stop
from tests.integration.test_kafka_listener import _guard, _start, _want

TAIL: Final = (
    TopicSpec("open-tail.v1", TieringOptions(chunk_size=3000), partitions=2),
    TopicSpec(
        "open-tail-sealed.v2",
        TieringOptions(chunk_size=1024, compression=True, encrypt_with=KEY_ID),
    ),
)
TAIL_SHAPE: Final = Shape(batches=44)  # batch 43 opens a transaction; the log ends there
SPAN: Final = (TopicSpec("open-span.v1", TieringOptions(chunk_size=2048)),)
SPAN_SHAPE: Final = Shape(batches=36, roll_every=17)  # opened at batch 33, rolled at 34
ISOLATION: Final = ["read_uncommitted", "read_committed"]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> IndependentBucket:
    root = tmp_path_factory.mktemp("open-tail")
    tail = write_independent_bucket(root / "tail", topics=TAIL, shape=TAIL_SHAPE)
    span = write_independent_bucket(root / "span", topics=SPAN, shape=SPAN_SHAPE)
    folder = tail.root / "bucket"
    folder.mkdir()
    asyncio.run(upload_all(FilesystemStore(folder), tail))
    asyncio.run(upload_all(FilesystemStore(folder), span))  # not encrypted: no key needed
    partitions = {**tail.partitions, **span.partitions}
    for written in partitions.values():  # the fixture is what these tests are about
        assert written.open_from is not None and written.open_from < written.next_offset
    (span_written,) = span.partitions.values()
    assert span_written.segments == 3  # the open transaction began before the last roll
    return IndependentBucket(tail.root, tail.key_pair_spec, tail.uploads, partitions)


@pytest.fixture(scope="module")
def served(
    bucket: IndependentBucket, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    """The (Kafka listener port, HTTP port) of a ``serve`` on the bucket."""
    log_path = tmp_path_factory.mktemp("open-tail-log") / "serve.log"
    proc, port = _start(bucket, log_path)
    try:
        yield port, _http_port(log_path.read_text())
    finally:
        stop(proc)


def _http_port(log: str) -> int:
    import re  # noqa: PLC0415

    found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log)
    assert found, log
    return int(found.group(1))


def _expected(written: WrittenPartition, isolation: str) -> list[tuple[Any, ...]]:
    records = written.stable() if isolation == "read_committed" else written.records
    return [_want(w) for w in records]


def _end(written: WrittenPartition, isolation: str) -> int:
    return written.last_stable_offset if isolation == "read_committed" else written.next_offset


# --- confluent-kafka: the end of partition is at the LSO ------------------------------------


def _confluent_read_to_eof(
    port: int, written: WrittenPartition, isolation: str
) -> tuple[list[tuple[Any, ...]], int]:
    """Read from the beginning until librdkafka reports the end of the partition; the records
    and the offset it reported the end at. Without the LSO, read_committed never gets it."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "open-tail-test",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        tp = confluent_kafka.TopicPartition(
            written.topic, written.partition, confluent_kafka.OFFSET_BEGINNING
        )
        consumer.assign([tp])
        got: list[tuple[Any, ...]] = []
        start = time.monotonic()
        while True:
            _guard(start, f"confluent-kafka {isolation} {written.topic}-{written.partition}")
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return got, message.offset()
                raise AssertionError(f"confluent-kafka: {message.error()}")
            got.append(rd_record(message))
    finally:
        consumer.close()


@pytest.mark.parametrize("isolation", ISOLATION)
def test_confluent_kafka_reaches_the_end_of_partition_at_the_last_stable_offset(
    served: tuple[int, int], bucket: IndependentBucket, isolation: str
) -> None:
    for written in bucket.partitions.values():
        got, eof_at = _confluent_read_to_eof(served[0], written, isolation)
        assert got == _expected(written, isolation), (written.topic, written.partition)
        assert eof_at == _end(written, isolation), (written.topic, written.partition)


# --- kafka-python and aiokafka: end_offsets, positions, timestamps --------------------------


@pytest.mark.parametrize("isolation", ISOLATION)
def test_kafka_python_end_offsets_and_reads_stop_at_the_last_stable_offset(
    served: tuple[int, int], bucket: IndependentBucket, isolation: str
) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{served[0]}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_wait_ms=100,
    )
    try:
        for written in bucket.partitions.values():
            tp = KTopicPartition(written.topic, written.partition)
            end = _end(written, isolation)
            assert consumer.end_offsets([tp]) == {tp: end}, tp
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while consumer.position(tp) < end:
                _guard(start, f"kafka-python {isolation} {tp}")
                for r in consumer.poll(timeout_ms=500).get(tp, []):
                    got.append(client_record(r))
            assert consumer.position(tp) == end
            assert got == _expected(written, isolation), tp
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times_past_the_last_stable_offset_is_none(
    served: tuple[int, int], bucket: IndependentBucket
) -> None:
    """A timestamp first reached inside the open transaction: read_uncommitted finds its
    offset, read_committed none (a broker filters matches at or past its LSO)."""
    for isolation in ISOLATION:
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{served[0]}", group_id=None, isolation_level=isolation
        )
        try:
            for written in bucket.partitions.values():
                tp = KTopicPartition(written.topic, written.partition)
                stamp = next(s for s in written.stamps if s.offset >= written.last_stable_offset)
                later = [s.timestamp for s in written.stamps if s.offset >= stamp.offset]
                # a timestamp no record before the LSO reaches
                before = [s.batch_max_timestamp for s in written.stamps if s.offset < stamp.offset]
                ts = max(before) + 1
                assert max(later) >= ts
                found = consumer.offsets_for_times({tp: ts})[tp]
                if isolation == "read_committed":
                    assert found is None, tp
                else:
                    assert found is not None and found.offset >= written.last_stable_offset, tp
        finally:
            consumer.close()


async def _aiokafka_ends(port: int, bucket: IndependentBucket, isolation: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False, isolation_level=isolation
    )
    await consumer.start()
    try:
        tps = {TopicPartition(w.topic, w.partition): w for w in bucket.partitions.values()}
        ends = await consumer.end_offsets(list(tps))
        assert ends == {tp: _end(w, isolation) for tp, w in tps.items()}
        for tp, written in tps.items():
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while await consumer.position(tp) < ends[tp]:
                _guard(start, f"aiokafka {isolation} {tp}")
                batch = await consumer.getmany(tp, timeout_ms=500)
                for r in batch.get(tp, []):
                    got.append(client_record(r))
            assert got == _expected(written, isolation), tp
            if isolation == "read_committed":  # from the Fetch responses
                assert consumer.last_stable_offset(tp) == written.last_stable_offset, tp
            assert consumer.highwater(tp) == written.next_offset, tp
    finally:
        await consumer.stop()


@pytest.mark.parametrize("isolation", ISOLATION)
def test_aiokafka_end_offsets_positions_and_last_stable_offset(
    served: tuple[int, int], bucket: IndependentBucket, isolation: str
) -> None:
    asyncio.run(_aiokafka_ends(served[0], bucket, isolation))


# --- the HTTP API -----------------------------------------------------------------------------


def test_http_read_committed_pages_stop_at_the_last_stable_offset(
    served: tuple[int, int], bucket: IndependentBucket
) -> None:
    """Over HTTP, read_committed ends at the LSO and says so in every format: JSON pages (small,
    so there are several) end with ``end_of_remote_log`` true and ``last_stable_offset`` at the
    LSO, never asking there (no 503 for a client that stops when told); a request at the LSO
    is the retriable 503 ``transaction_pending`` carrying the bounds; an NDJSON stream from 0
    ends there with its closing line saying so; raw pages carry ``X-Last-Stable-Offset`` and
    ``X-End-Of-Remote-Log``. read_uncommitted reads to the log end, with no LSO. ListOffsets
    latest is the LSO with read_committed, the log end without."""
    base = f"http://127.0.0.1:{served[1]}/v1/topics"
    committed = {"isolation_level": "read_committed"}
    with httpx.Client(timeout=30) as client:
        for written in bucket.partitions.values():
            url = f"{base}/{written.topic}/partitions/{written.partition}/records"
            lso, end = written.last_stable_offset, written.next_offset
            assert lso < end  # the fixture: a transaction open at the tail
            offsets: list[int] = []
            offset, pages = 0, 0
            while True:
                answer = client.get(url, params={"offset": offset, "max_bytes": 4096, **committed})
                assert answer.status_code == 200, answer.text
                page = answer.json()
                pages += 1
                offsets += [r["offset"] for r in page["records"]]
                assert page["next_offset"] > offset
                assert (page["log_end_offset"], page["last_stable_offset"]) == (end, lso)
                offset = page["next_offset"]
                if page["end_of_remote_log"]:
                    break
            assert pages > 1, written.topic
            assert offset == lso
            assert offsets == [w.offset for w in written.stable()]
            start = page["log_start_offset"]

            at_lso = client.get(url, params={"offset": lso, **committed})
            assert at_lso.status_code == 503, at_lso.text
            error = at_lso.json()
            assert (error["error_code"], error["retriable"]) == ("transaction_pending", True)
            names = ("log_start_offset", "log_end_offset", "last_stable_offset")
            assert tuple(error[n] for n in names) == (start, end, lso)
            assert at_lso.headers["retry-after"] == "1"

            stream = client.get(
                url, params={"offset": 0, **committed}, headers={"Accept": "application/x-ndjson"}
            )
            assert stream.status_code == 200, stream.text
            *lines, closing = [json.loads(line) for line in stream.text.splitlines()]
            assert [r["offset"] for r in lines] == [w.offset for w in written.stable()]
            assert closing == {
                "next_offset": lso,
                "log_start_offset": start,
                "log_end_offset": end,
                "last_stable_offset": lso,
                "end_of_remote_log": True,
            }

            raw = {"Accept": "application/octet-stream"}
            offset, headers = 0, httpx.Headers()
            while headers.get("x-end-of-remote-log") != "true":
                answer = client.get(
                    url, params={"offset": offset, "max_bytes": 4096, **committed}, headers=raw
                )
                assert answer.status_code == 200, answer.text
                headers = answer.headers
                assert headers["x-last-stable-offset"] == str(lso)
                assert int(headers["x-next-offset"]) > offset
                offset = int(headers["x-next-offset"])
            assert offset == lso

            uncommitted = client.get(url, params={"offset": lso})
            assert uncommitted.status_code == 200, uncommitted.text
            assert uncommitted.json()["last_stable_offset"] is None
            assert uncommitted.json()["records"][0]["offset"] == lso  # past it: the open txn
            raw_uncommitted = client.get(url, params={"offset": lso}, headers=raw)
            assert "x-last-stable-offset" not in raw_uncommitted.headers

            offsets_url = f"{base}/{written.topic}/partitions/{written.partition}/offsets"
            latest = {"timestamp": "latest"}
            assert client.get(offsets_url, params={**latest, **committed}).json()["offset"] == lso
            assert client.get(offsets_url, params=latest).json()["offset"] == end


# --- a damaged snapshot -----------------------------------------------------------------------


def test_a_damaged_tail_snapshot_fails_read_committed_only(
    bucket: IndependentBucket, tmp_path: Path
) -> None:
    """A bit flipped in the CRC of the tail segment's producer snapshot: read_committed reads
    of that partition fail with the typed error naming the ``.indexes`` object (the stable
    offset cannot be known), read_uncommitted ones, which do not use it, read everything."""
    shutil.copytree(bucket.root / "bucket", tmp_path / "bucket")
    written = bucket.partitions[("open-tail.v1", 0)]
    tail = max(
        (o for o in bucket.uploads if _partition_of(o) == ("open-tail.v1", 0)),
        key=lambda o: _meta(o).end_offset,
    )
    piece = tail.manifest.segment_indexes[IndexType.PRODUCER_SNAPSHOT]
    assert piece is not None and piece.size > 6
    key = tail.key.with_suffix(Suffix.INDEXES).key
    path = tmp_path / "bucket" / key
    data = bytearray(path.read_bytes())
    data[piece.position + 3] ^= 0x10  # inside the CRC-32C
    path.write_bytes(bytes(data))
    log_path = tmp_path / "serve.log"
    proc, port = _start(dataclasses.replace(bucket, root=tmp_path), log_path)
    try:
        url = (f"http://127.0.0.1:{_http_port(log_path.read_text())}/v1/topics/open-tail.v1/"
               "partitions/0/records")  # fmt: skip
        with httpx.Client(timeout=30) as client:
            answer = client.get(url, params={"offset": 0, "isolation_level": "read_committed"})
            assert answer.status_code == 502, answer.text
            assert key in answer.json()["message"] and "producer snapshot" in answer.text
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{port}", group_id=None, fetch_max_wait_ms=100
        )
        try:
            tp = KTopicPartition("open-tail.v1", 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while consumer.position(tp) < written.next_offset:
                _guard(start, "kafka-python read_uncommitted, damaged snapshot")
                got += [client_record(r) for r in consumer.poll(timeout_ms=500).get(tp, [])]
            assert got == _expected(written, "read_uncommitted")
        finally:
            consumer.close()
    finally:
        stop(proc)


def _meta(objects: SegmentObjects) -> ManifestSegmentMetadata:
    meta = objects.manifest.remote_log_segment_metadata
    assert meta is not None
    return meta


def _partition_of(objects: SegmentObjects) -> tuple[str, int]:
    meta = _meta(objects)
    return meta.topic, meta.partition
