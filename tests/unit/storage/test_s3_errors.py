"""The S3 error table: structured codes decide the domain error and its retriability."""

from __future__ import annotations

import aiohttp
import botocore.exceptions
import pytest

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.s3 import translate


def _client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {
            "Error": {"Code": code, "Message": "SlowDown please"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "kind", "retriable"),
    [
        ("NoSuchKey", 404, ObjectNotFoundError, False),
        ("404", 404, ObjectNotFoundError, False),
        ("AccessDenied", 403, ConfigurationError, False),
        ("NoSuchBucket", 404, StorageUnavailableError, True),  # the bucket away (issue 33)
        ("InvalidAccessKeyId", 403, ConfigurationError, False),
        ("SlowDown", 503, StorageUnavailableError, True),
        ("InternalError", 500, StorageUnavailableError, True),
        ("RequestTimeout", 400, StorageUnavailableError, True),
        ("SomethingNew", 502, StorageUnavailableError, True),  # any 5xx
        ("InvalidArgument", 400, StorageError, False),
    ],
)
def test_client_error_codes(
    code: str, status: int, kind: type[GatewayError], retriable: bool
) -> None:
    err = translate(_client_error(code, status), "GET s3://b/k")
    assert type(err) is kind and err.retriable is retriable
    assert "GET s3://b/k" in str(err)


def test_message_text_is_not_used() -> None:
    err = translate(_client_error("InvalidArgument", 400), "op")  # message says "SlowDown"
    assert not err.retriable


@pytest.mark.parametrize(
    "exc",
    [
        botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"),
        botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"),
        aiohttp.ClientPayloadError("short body"),
        ConnectionResetError(),
    ],
)
def test_transport_faults_are_retriable(exc: Exception) -> None:
    err = translate(exc, "op")
    assert isinstance(err, StorageUnavailableError) and err.retriable


def test_missing_credentials_is_configuration() -> None:
    assert isinstance(translate(botocore.exceptions.NoCredentialsError(), "op"), ConfigurationError)
