"""What real Kafka clients return, as comparable tuples, for the listener's end-to-end tests.

Every record becomes ``(offset, timestamp, timestamp type (1: LogAppendTime), key, value,
headers)``, the same shape as :func:`want` makes of what the independent encoder wrote.
"""

from __future__ import annotations

from typing import Any

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
