"""One translation for every store (``map_exceptions``), and the errors a new user meets first:
a ``file://`` URL with a host, an S3 endpoint that does not answer, no AWS credentials."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from pathlib import Path

import botocore.exceptions
import pytest

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.factory import open_store
from gateway.storage.s3 import S3Options, S3Store
from gateway.storage.sync import SyncStoreSpec
from gateway.storage.translate import map_exceptions
from gateway.storage.url import parse_store_url


@pytest.mark.parametrize(
    ("exc", "kind", "retriable"),
    [
        (FileNotFoundError(errno.ENOENT, "gone"), ObjectNotFoundError, False),
        (IsADirectoryError(errno.EISDIR, "dir"), ObjectNotFoundError, False),
        (PermissionError(errno.EACCES, "no"), ConfigurationError, False),
        (OSError(errno.EIO, "I/O error"), StorageUnavailableError, True),
        (OSError(errno.ENOSPC, "full"), StorageError, False),
        (ConnectionResetError(errno.ECONNRESET, "reset"), StorageError, False),
    ],
)
def test_filesystem_os_errors(exc: OSError, kind: type[GatewayError], retriable: bool) -> None:
    with pytest.raises(kind) as caught, map_exceptions("a/b.log", store="filesystem"):
        raise exc
    assert type(caught.value) is kind and caught.value.retriable is retriable
    assert "'a/b.log'" in str(caught.value) and caught.value.__cause__ is exc


@pytest.mark.parametrize(
    ("exc", "kind", "retriable"),
    [
        (botocore.exceptions.EndpointConnectionError(endpoint_url="x"), StorageUnavailableError, 1),
        (ConnectionResetError(), StorageUnavailableError, 1),
        (botocore.exceptions.NoCredentialsError(), ConfigurationError, 0),
        (RuntimeError("boom"), StorageError, 0),
    ],
)  # fmt: skip
def test_s3_errors_go_through_the_table(
    exc: Exception, kind: type[GatewayError], retriable: int
) -> None:
    with pytest.raises(kind) as caught, map_exceptions("GET s3://b/k", store="s3"):
        raise exc
    assert type(caught.value) is kind and caught.value.retriable is bool(retriable)
    assert str(caught.value).startswith("GET s3://b/k: ")


def test_domain_errors_and_programming_errors_pass() -> None:
    original = InvalidKeyError("bad key")
    with pytest.raises(InvalidKeyError) as caught, map_exceptions("k", store="s3"):
        raise original
    assert caught.value is original
    with pytest.raises(ValueError, match="range"), map_exceptions("k", store="filesystem"):
        raise ValueError("invalid range")


def test_a_fault_before_s3_names_the_endpoint() -> None:
    err = botocore.exceptions.ConnectTimeoutError(endpoint_url="x")
    endpoint = "http://minio:9000"
    with (
        pytest.raises(StorageUnavailableError) as caught,
        map_exceptions("LIST s3://b/", store="s3", endpoint=endpoint),
    ):
        raise err
    assert "LIST s3://b/" in str(caught.value) and "http://minio:9000" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "guess"),
    [("file://bucket", "file:///bucket"), ("file://tmp/bucket/", "file:///tmp/bucket/")],
)
def test_file_url_with_a_host_suggests_three_slashes(url: str, guess: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_store_url(url)
    message = str(caught.value)
    assert "file URLs take no host" in message and "file:///abs/path" in message
    assert repr(guess) in message


@pytest.fixture
def refused_endpoint() -> Iterator[str]:
    """An endpoint that refuses connections: a port bound but not listening, held open."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def with_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def without_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)


@pytest.mark.usefixtures("with_credentials")
@pytest.mark.parametrize("data_plane", ["aiohttp", "aioboto3", "httpx"])
async def test_s3_connection_failure_names_endpoint_and_bucket(
    refused_endpoint: str, data_plane: str
) -> None:
    store = await S3Store(
        S3Options("my-bucket", refused_endpoint, "us-east-1", data_plane=data_plane)  # type: ignore[arg-type]
    ).open()
    try:
        with pytest.raises(StorageUnavailableError) as listing:
            [info async for info in store.list("tiered/")]
        with pytest.raises(StorageUnavailableError) as reading:
            await store.get_range("tiered/x.log", 0, 10)
    finally:
        await store.close()
    for caught in (listing, reading):
        assert "s3://my-bucket/" in str(caught.value) and refused_endpoint in str(caught.value)


@pytest.mark.usefixtures("with_credentials")
def test_sync_s3_connection_failure_names_endpoint_and_bucket(refused_endpoint: str) -> None:
    store = SyncStoreSpec("s3://my-bucket", refused_endpoint, "us-east-1", timeout_s=2).open()
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            list(store.list(""))
    finally:
        store.close()
    assert "s3://my-bucket/" in str(caught.value) and refused_endpoint in str(caught.value)


@pytest.mark.usefixtures("without_credentials")
async def test_no_credentials_is_refused_at_open_naming_the_sources(refused_endpoint: str) -> None:
    """Before: the store opened, and the first request failed (after the instance-metadata
    probe) with a bare "no AWS credentials found"."""
    with pytest.raises(ConfigurationError) as caught:
        await open_store("s3://my-bucket", endpoint_url=refused_endpoint, region="us-east-1")
    message = str(caught.value)
    assert "s3://my-bucket" in message and refused_endpoint in message
    for source in ("AWS_ACCESS_KEY_ID", "~/.aws/credentials", "AWS_PROFILE", "instance metadata"):
        assert source in message
    assert "AWS_EC2_METADATA_DISABLED" in message


@pytest.mark.usefixtures("without_credentials")
def test_sync_store_without_credentials_is_refused_at_open(refused_endpoint: str) -> None:
    with pytest.raises(ConfigurationError, match=r"no AWS credentials found .*AWS_ACCESS_KEY_ID"):
        SyncStoreSpec("s3://my-bucket", refused_endpoint, "us-east-1").open()


@pytest.mark.usefixtures("without_credentials")
async def test_a_missing_profile_is_a_configuration_error_at_open(
    monkeypatch: pytest.MonkeyPatch, refused_endpoint: str
) -> None:
    """Before: botocore's ``ProfileNotFound`` left the store untranslated (a traceback)."""
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(ConfigurationError, match="no-such-profile"):
        await open_store("s3://my-bucket", endpoint_url=refused_endpoint, region="us-east-1")
    with pytest.raises(ConfigurationError, match="no-such-profile"):
        SyncStoreSpec("s3://my-bucket", refused_endpoint, "us-east-1").open()
