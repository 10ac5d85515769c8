"""``serve --kafka-listener``: consumer groups, commits and configs with real clients.

The same real ``serve`` process and end-to-end bucket as
:mod:`tests.integration.test_kafka_listener` (its fixtures). The listener keeps no group state
(:mod:`gateway.listener.groups`), and each client must be told so in a way it acts on:

* a confluent-kafka consumer with a ``group.id`` that ``assign()``s partitions with no offset
  (the committed one, of which there is none) reads each whole partition from
  ``auto.offset.reset`` = earliest, across its refused auto-commits (on, the default), which
  never reach ``poll()``; kafka-python's does the same, aiokafka's without auto-commit;
* a ``subscribe()`` consumer (confluent-kafka, kafka-python, aiokafka) gets
  ``GROUP_AUTHORIZATION_FAILED`` from its poll at once, rather than waiting for partitions;
* an explicit commit raises; ``AdminClient.describe_configs`` returns the error and its
  message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import pytest
from kafka import KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupAuthorizationFailedError

from gateway.listener.groups import NO_CONFIGS
from tests.integration import test_kafka_listener as base
from tests.integration.independent_bucket import IndependentBucket, WrittenPartition
from tests.integration.kafka_clients import client_record, rd_record
from tests.integration.test_kafka_listener import _expected, _guard

confluent_kafka = pytest.importorskip("confluent_kafka")

bucket = base.bucket  # the fixtures: the end-to-end bucket, a serve process with the listener
listener = base.listener

ERROR_BOUND_S: Final = 60.0
"""How long a subscribe() consumer may take to report the error: a guard against one that
waits for ever (measured: well under a second), not a verdict raced against a timeout."""


def _first(bucket: IndependentBucket) -> WrittenPartition:
    return max(bucket.partitions.values(), key=lambda w: w.next_offset)


# --- (1) assign() with the committed offset: none, so auto.offset.reset ------------------------


def _rd_read_across_a_refused_commit(
    consumer: Any, written: WrittenPartition, refused: list[Any]
) -> list[tuple[Any, ...]]:
    """Read ``written`` to its end; halfway, pause the partition and poll until an auto-commit
    is refused (``refused`` grows), then resume: the records after it must follow exactly."""
    tp = confluent_kafka.TopicPartition(written.topic, written.partition)
    got: list[tuple[Any, ...]] = []
    paused_once = False
    start = time.monotonic()
    while True:
        (position,) = consumer.position([tp])
        if position.offset >= written.next_offset:
            break
        _guard(start, f"confluent-kafka {written.topic}-{written.partition}")
        if not paused_once and position.offset >= written.next_offset // 2:
            consumer.pause([tp])
            before = len(refused)
            while len(refused) == before:  # the auto-commit timer: every 100 ms
                _guard(start, "confluent-kafka: no auto-commit answer")
                assert consumer.poll(0.2) is None, "a message from a paused partition"
            consumer.resume([tp])
            paused_once = True
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
            continue
        got.append(rd_record(message))
    assert position.offset == written.next_offset
    return got


def test_confluent_assign_with_no_committed_offset_reads_every_partition_with_auto_commit(
    listener: int, bucket: IndependentBucket
) -> None:
    """``assign()`` at ``OFFSET_STORED`` (the committed offset): librdkafka asks the coordinator
    (the gateway), gets -1, starts at ``auto.offset.reset`` = earliest and reads each whole
    partition exactly, across its refused auto-commits (on, the default; every 100 ms here):
    ``on_commit`` is told ``GROUP_AUTHORIZATION_FAILED``, nothing reaches ``poll()``."""
    for written in bucket.partitions.values():
        refused: list[Any] = []
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{listener}",
                "group.id": "kafka-listener-groups",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",  # librdkafka's default
                "auto.commit.interval.ms": 100,
                "message.max.bytes": 1000,
                "fetch.max.bytes": 64 * 1024,
                "max.partition.fetch.bytes": 16 * 1024,
                "on_commit": lambda error, partitions, into=refused: into.append(error),
            },
        )
        try:
            tp = confluent_kafka.TopicPartition(written.topic, written.partition)
            assert tp.offset == confluent_kafka.OFFSET_INVALID  # "use the committed offset"
            consumer.assign([tp])
            got = _rd_read_across_a_refused_commit(consumer, written, refused)
        finally:
            consumer.close()
        assert got == _expected(written, "read_committed"), (written.topic, written.partition)
        codes = {e.code() if e is not None else None for e in refused}
        assert codes == {confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED}, refused


def test_kafka_python_assign_with_a_group_and_no_committed_offset_reads_a_partition(
    listener: int, bucket: IndependentBucket
) -> None:
    """kafka-python with ``group_id`` and auto-commit on: no committed offset (OffsetFetch
    answers -1), so it starts at ``auto_offset_reset`` = earliest; halfway, paused until an
    auto-commit is refused, ``poll()`` then reads on to the end exactly."""
    written = _first(bucket)
    results: list[Any] = []
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{listener}",
        group_id="kafka-listener-groups",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=100,
        max_partition_fetch_bytes=1024,
        default_offset_commit_callback=lambda offsets, result: results.append(result),
    )
    try:
        tp = KTopicPartition(written.topic, written.partition)
        consumer.assign([tp])
        assert consumer.committed(tp) is None
        got: list[tuple[Any, ...]] = []
        paused_once = False
        start = time.monotonic()
        while consumer.position(tp) < written.next_offset:
            _guard(start, f"kafka-python {written.topic}-{written.partition}")
            if not paused_once and consumer.position(tp) >= written.next_offset // 2:
                consumer.pause(tp)
                while not results:
                    _guard(start, "kafka-python: no auto-commit answer")
                    assert consumer.poll(timeout_ms=200) == {}
                consumer.resume(tp)
                paused_once = True
            for r in consumer.poll(timeout_ms=500).get(tp, []):
                got.append(client_record(r))
        assert got == _expected(written, "read_uncommitted")
        assert results and all(isinstance(r, GroupAuthorizationFailedError) for r in results)
    finally:
        consumer.close(autocommit=False)


def test_aiokafka_assign_with_a_group_reads_a_partition_without_auto_commit(
    listener: int, bucket: IndependentBucket
) -> None:
    """aiokafka with ``group_id``: no committed offset, so ``auto_offset_reset`` = earliest.
    ``enable_auto_commit=False``: aiokafka raises a refused auto-commit from ``getmany()`` and
    commits again at once (docs/kafka-listener.md, "Consumer groups")."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    written = _first(bucket)

    async def run() -> list[tuple[Any, ...]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{listener}",
            group_id="kafka-listener-groups",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            tp = TopicPartition(written.topic, written.partition)
            consumer.assign([tp])
            assert await consumer.committed(tp) is None
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while await consumer.position(tp) < written.next_offset:
                _guard(start, f"aiokafka {written.topic}-{written.partition}")
                for r in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    got.append(client_record(r))
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == _expected(written, "read_uncommitted")


# --- (2), (3) subscribe(): a clear error at once ------------------------------------------------


def test_confluent_subscribe_gets_the_group_error_from_poll(
    listener: int, bucket: IndependentBucket
) -> None:
    written = _first(bucket)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{listener}", "group.id": "kafka-listener-groups"}
    )
    try:
        consumer.subscribe([written.topic])
        start = time.monotonic()
        error = None
        while error is None:
            assert time.monotonic() - start < ERROR_BOUND_S, "no error from poll()"
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is not None, "a record from a subscription"
                error = message.error()
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    assert error.code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED, error
    assert "JoinGroup" in error.str(), error
    assert not error.retriable()
    print(f"confluent-kafka subscribe(): {error.str()!r} after {elapsed:.2f} s")


def test_kafka_python_subscribe_raises_the_group_error(
    listener: int, bucket: IndependentBucket
) -> None:
    written = _first(bucket)
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{listener}", group_id="kafka-listener-groups"
    )
    try:
        consumer.subscribe([written.topic])
        start = time.monotonic()
        with pytest.raises(GroupAuthorizationFailedError):
            while time.monotonic() - start < ERROR_BOUND_S:
                assert consumer.poll(timeout_ms=1000) == {}, "records from a subscription"
        print(f"kafka-python subscribe(): raised after {time.monotonic() - start:.2f} s")
    finally:
        consumer.close(autocommit=False)


def test_aiokafka_subscribe_raises_the_group_error(
    listener: int, bucket: IndependentBucket
) -> None:
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415
    from aiokafka.errors import GroupAuthorizationFailedError as AioGroupError  # noqa: PLC0415

    written = _first(bucket)

    async def run() -> float:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{listener}", group_id="kafka-listener-groups"
        )
        await consumer.start()
        try:
            consumer.subscribe([written.topic])
            start = time.monotonic()
            with pytest.raises(AioGroupError):
                await asyncio.wait_for(consumer.getone(), ERROR_BOUND_S)
            return time.monotonic() - start
        finally:
            await consumer.stop()

    print(f"aiokafka subscribe(): raised after {asyncio.run(run()):.2f} s")


# --- (4) an explicit commit raises --------------------------------------------------------------


def test_an_explicit_commit_raises(listener: int, bucket: IndependentBucket) -> None:
    written = _first(bucket)
    rd = confluent_kafka.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{listener}", "group.id": "kafka-listener-groups",
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        tp = confluent_kafka.TopicPartition(written.topic, written.partition, 1)
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            rd.commit(offsets=[tp], asynchronous=False)
        error = raised.value.args[0]
        assert error.code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        rd.close()
    kp = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{listener}",
                       group_id="kafka-listener-groups", enable_auto_commit=False)  # fmt: skip
    try:
        ktp = KTopicPartition(written.topic, written.partition)
        kp.assign([ktp])
        with pytest.raises(GroupAuthorizationFailedError):
            kp.commit({ktp: OffsetAndMetadata(1, "", -1)})
    finally:
        kp.close(autocommit=False)

    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415
    from aiokafka.errors import GroupAuthorizationFailedError as AioGroupError  # noqa: PLC0415

    async def aiokafka_commit() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{listener}",
            group_id="kafka-listener-groups",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            atp = TopicPartition(written.topic, written.partition)
            consumer.assign([atp])
            with pytest.raises(AioGroupError):
                await consumer.commit({atp: 1})
        finally:
            await consumer.stop()

    asyncio.run(aiokafka_commit())


# --- (5) DescribeConfigs ------------------------------------------------------------------------


def test_admin_describe_configs_returns_the_clear_error(
    listener: int, bucket: IndependentBucket
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: PLC0415

    written = _first(bucket)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{listener}"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, written.topic)
    (future,) = admin.describe_configs([resource], request_timeout=30).values()
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        future.result(timeout=60)
    error = raised.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_REQUEST, error
    assert NO_CONFIGS in error.str(), error
