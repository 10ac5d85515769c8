"""What real Kafka clients return, as comparable tuples, for the listener's end-to-end tests.

Every record becomes ``(offset, timestamp, timestamp type (1: LogAppendTime), key, value,
headers)``, the same shape as :func:`want` makes of what the independent encoder wrote.
"""

from __future__ import annotations

import time
from typing import Any, Final

from tests.integration.independent_bucket import Written

Record = tuple[Any, ...]


def want(w: Written) -> Record:
    """A written record as a consumer must see it."""
    return (w.offset, w.timestamp, 1 if w.log_append_time else 0, w.key, w.value,
            tuple((k, v) for k, v in w.headers))  # fmt: skip


def client_record(r: Any) -> Record:
    """A kafka-python ``ConsumerRecord`` or an aiokafka one."""
    return (r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
            tuple((k, v) for k, v in r.headers))  # fmt: skip


def rd_record(message: Any) -> Record:
    """A confluent-kafka (librdkafka) ``Message``."""
    import confluent_kafka  # noqa: PLC0415 - an optional client

    kind, ts = message.timestamp()
    log_append = 1 if kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME else 0
    headers = tuple((k, v) for k, v in message.headers() or [])
    return (message.offset(), ts, log_append, message.key(), message.value(), headers)


READ_LIMIT_S: Final = 120.0  # a guard against a consumer that never reaches the end


def guard(start: float, what: str) -> None:
    """Fail a read loop that has not reached its end ``READ_LIMIT_S`` after ``start`` (a
    guard against a hang, never the verdict of a test)."""
    if time.monotonic() - start > READ_LIMIT_S:
        raise AssertionError(f"{what}: did not reach the remote end within {READ_LIMIT_S} s")


def rd_read(consumer: Any, topic: str, partition: int, end: int) -> list[Record]:
    """Assign ``consumer`` (confluent-kafka) the partition at its beginning and poll until its
    position reaches ``end``; the records. The end-of-partition event is passed over; any
    other error fails the read."""
    import confluent_kafka  # noqa: PLC0415 - an optional client

    tp = confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
    consumer.assign([tp])
    got: list[Record] = []
    start = time.monotonic()
    while True:
        (position,) = consumer.position([tp])
        if position.offset >= end:
            break
        guard(start, f"confluent-kafka {topic}-{partition}")
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"confluent-kafka: {error}")
        got.append(rd_record(message))
    assert position.offset == end
    return got
