"""Kafka error codes for the gateway's typed errors, chosen for what a consumer does with them.

Consumers (Java's ``Fetcher``, kafka-python, librdkafka) retry a partition after
``KAFKA_STORAGE_ERROR`` or ``LEADER_NOT_AVAILABLE`` (a metadata refresh first), fail loudly on
``CORRUPT_MESSAGE`` and reset or fail on ``OFFSET_OUT_OF_RANGE``; an unexpected code makes
some of them throw, so only these are used. A retriable gateway error (the store unavailable,
a deadline passed, overload) is ``KAFKA_STORAGE_ERROR``; corrupt data is ``CORRUPT_MESSAGE``
(bytes that fail a check are never served, and retrying does not change the bucket); any other
non-retriable error (e.g. a key pair not configured) is ``UNKNOWN_SERVER_ERROR``, logged.
"""

from __future__ import annotations

from typing import Final

from gateway.errors import (
    CorruptDataError,
    GatewayError,
    InvalidRequestError,
    NotReadyError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

NONE: Final = 0
UNKNOWN_SERVER_ERROR: Final = -1
OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
LEADER_NOT_AVAILABLE: Final = 5
COORDINATOR_NOT_AVAILABLE: Final = 15
TOPIC_AUTHORIZATION_FAILED: Final = 29
GROUP_AUTHORIZATION_FAILED: Final = 30
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
UNSUPPORTED_VERSION: Final = 35
INVALID_REQUEST: Final = 42
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
KAFKA_STORAGE_ERROR: Final = 56
SASL_AUTHENTICATION_FAILED: Final = 58
FETCH_SESSION_ID_NOT_FOUND: Final = 70
UNKNOWN_TOPIC_ID: Final = 100


NAMES: Final[dict[int, str]] = {
    NONE: "NONE",
    UNKNOWN_SERVER_ERROR: "UNKNOWN_SERVER_ERROR",
    OFFSET_OUT_OF_RANGE: "OFFSET_OUT_OF_RANGE",
    CORRUPT_MESSAGE: "CORRUPT_MESSAGE",
    UNKNOWN_TOPIC_OR_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION",
    LEADER_NOT_AVAILABLE: "LEADER_NOT_AVAILABLE",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    TOPIC_AUTHORIZATION_FAILED: "TOPIC_AUTHORIZATION_FAILED",
    GROUP_AUTHORIZATION_FAILED: "GROUP_AUTHORIZATION_FAILED",
    UNSUPPORTED_SASL_MECHANISM: "UNSUPPORTED_SASL_MECHANISM",
    ILLEGAL_SASL_STATE: "ILLEGAL_SASL_STATE",
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    INVALID_REQUEST: "INVALID_REQUEST",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    KAFKA_STORAGE_ERROR: "KAFKA_STORAGE_ERROR",
    SASL_AUTHENTICATION_FAILED: "SASL_AUTHENTICATION_FAILED",
    FETCH_SESSION_ID_NOT_FOUND: "FETCH_SESSION_ID_NOT_FOUND",
    UNKNOWN_TOPIC_ID: "UNKNOWN_TOPIC_ID",
}
"""The codes this listener answers, by Kafka's names (the metrics' ``error`` label)."""


def name_of(code: int) -> str:
    return NAMES.get(code, str(code))


def error_code(exc: Exception) -> int:
    """The Kafka error code an answer carries for ``exc``: the listener's one table from an
    exception to a code (any exception that is not a :class:`GatewayError` is a bug:
    ``UNKNOWN_SERVER_ERROR``; :meth:`Failures.failed` logs it so)."""
    if not isinstance(exc, GatewayError):
        return UNKNOWN_SERVER_ERROR
    if isinstance(exc, UnknownTopicOrPartitionError):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, OffsetOutOfRangeError):
        return OFFSET_OUT_OF_RANGE
    if isinstance(exc, NotReadyError):
        return LEADER_NOT_AVAILABLE
    if isinstance(exc, CorruptDataError):
        return CORRUPT_MESSAGE
    if isinstance(exc, InvalidRequestError):
        return INVALID_REQUEST
    if exc.retriable:
        return KAFKA_STORAGE_ERROR
    return UNKNOWN_SERVER_ERROR
