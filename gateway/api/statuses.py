"""The HTTP status of each error type: the HTTP adapter's one table (the domain errors carry
none, :mod:`gateway.errors`). A type not in it answers the status of its nearest ancestor that
is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.errors import (
    AuthenticationError,
    AuthorizationError,
    AuthUnavailableError,
    ConfigurationError,
    CorruptDataError,
    DeadlineExceededError,
    ExportFailedError,
    GatewayError,
    InvalidFormatError,
    InvalidKeyError,
    InvalidRequestError,
    InvalidStateTransitionError,
    MetadataError,
    MetadataUnavailableError,
    NotAcceptableError,
    NotReadyError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    OverloadedError,
    RateLimitedError,
    RemoteResourceNotFoundError,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
    StorageError,
    StorageUnavailableError,
    TransactionPendingError,
    UnknownTopicOrPartitionError,
    UnsupportedFormatError,
)

HTTP_STATUS: Final[Mapping[type[GatewayError], int]] = {
    GatewayError: 500,
    CorruptDataError: 502,
    UnsupportedFormatError: 501,
    StorageError: 502,
    ObjectNotFoundError: 404,
    StorageUnavailableError: 503,
    DeadlineExceededError: 504,
    MetadataError: 500,
    MetadataUnavailableError: 503,
    InvalidStateTransitionError: 409,
    RemoteResourceNotFoundError: 404,
    UnknownTopicOrPartitionError: 404,
    InvalidRequestError: 400,
    InvalidFormatError: 422,
    SchemaRegistryError: 502,
    SchemaRegistryUnavailableError: 503,
    NotAcceptableError: 406,
    NotReadyError: 503,
    OverloadedError: 503,
    TransactionPendingError: 503,
    OffsetOutOfRangeError: 416,
    AuthenticationError: 401,
    AuthorizationError: 403,
    AuthUnavailableError: 503,
    RateLimitedError: 429,
    ConfigurationError: 500,
    InvalidKeyError: 400,
    ExportFailedError: 500,
}


def http_status(exc: GatewayError | type[GatewayError]) -> int:
    """The status of ``exc``'s type (or of the type given), or of its nearest ancestor in
    :data:`HTTP_STATUS`."""
    for cls in (exc if isinstance(exc, type) else type(exc)).__mro__:
        status = HTTP_STATUS.get(cls)
        if status is not None:
            return status
    return 500
