"""The S3 error table: structured codes decide the domain error and its retriability."""

from __future__ import annotations

import subprocess
import sys

import aiohttp
import botocore.exceptions
import httpx
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
        botocore.exceptions.IncompleteReadError(actual_bytes=1, expected_bytes=2),
        aiohttp.ClientPayloadError("short body"),
        aiohttp.ServerDisconnectedError(),
        httpx.ReadTimeout("slow"),
        httpx.ConnectError("refused"),
        httpx.RemoteProtocolError("closed early"),
        ConnectionResetError(),
    ],
)
def test_transport_faults_are_retriable(exc: Exception) -> None:
    err = translate(exc, "op")
    assert isinstance(err, StorageUnavailableError) and err.retriable


def test_missing_credentials_is_configuration() -> None:
    assert isinstance(translate(botocore.exceptions.NoCredentialsError(), "op"), ConfigurationError)


def test_a_profile_missing_or_half_a_key_pair_is_configuration() -> None:
    for exc in (
        botocore.exceptions.ProfileNotFound(profile="nope"),
        botocore.exceptions.PartialCredentialsError(provider="env", cred_var="secret"),
    ):
        assert isinstance(translate(exc, "op"), ConfigurationError)


def test_other_faults_are_storage_errors_not_retried() -> None:
    err = translate(ValueError("a bug"), "op")
    assert type(err) is StorageError and not err.retriable


def test_a_spark_worker_loads_no_s3_http_or_kafka_client() -> None:
    """The error table looks the client libraries' types up among the loaded modules: what a
    Spark worker imports to read a file:// bucket loads none of boto3, aiohttp, httpx or
    kafka-python (each costs its import in every worker process)."""
    code = (
        "import sys, gateway.spark.source, gateway.storage.sync, gateway.metadata.bucket; "
        "print(sorted({'boto3', 'botocore', 'aiohttp', 'httpx', 'kafka'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
