"""The S3 store (``s3://bucket``): aioboto3, one pooled client per process.

botocore's own retries are off: retries happen in :mod:`gateway.storage.retry`, inside the
request's deadline. Every botocore/aiohttp failure is translated here, in one table, from
structured error codes (never message text) into the :mod:`gateway.errors` storage tree.
Credentials come from the usual AWS sources (environment, profile, instance role).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aioboto3
import aiohttp
import botocore.exceptions
from aiobotocore.config import AioConfig

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.base import ObjectInfo

T = TypeVar("T")

NOT_FOUND: Final = frozenset({"NoSuchKey", "NotFound", "404"})
CONFIGURATION: Final = frozenset(
    {
        "NoSuchBucket",
        "AccessDenied",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "InvalidBucketName",
        "PermanentRedirect",
    }
)
TRANSIENT: Final = frozenset(
    {
        "SlowDown",
        "503",
        "ServiceUnavailable",
        "InternalError",
        "500",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
    }
)
_TRANSIENT_EXCEPTIONS: Final = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.IncompleteReadError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientConnectionError,
    ConnectionResetError,
)


def translate(exc: Exception, what: str) -> GatewayError:
    """The one S3 error table: a botocore/aiohttp exception to a domain error."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in NOT_FOUND:
            return ObjectNotFoundError(f"{what}: not found ({code})")
        if code in CONFIGURATION:
            return ConfigurationError(f"{what}: {code}: check the bucket and credentials")
        if code in TRANSIENT or (isinstance(status, int) and status >= 500):
            return StorageUnavailableError(f"{what}: {code or status}")
        return StorageError(f"{what}: {code or status}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return ConfigurationError(f"{what}: no AWS credentials found")
    if isinstance(exc, _TRANSIENT_EXCEPTIONS):
        return StorageUnavailableError(f"{what}: {type(exc).__name__}")
    return StorageError(f"{what}: {type(exc).__name__}")


@dataclass(frozen=True, slots=True)
class S3Options:
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    max_pool_connections: int = 64


class S3Store:
    """An :class:`~gateway.storage.base.ObjectStore` over one S3 bucket."""

    def __init__(self, options: S3Options) -> None:
        self._options = options
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None

    def __repr__(self) -> str:
        return f"S3Store(bucket={self._options.bucket!r}, endpoint={self._options.endpoint_url!r})"

    async def open(self) -> S3Store:
        config = AioConfig(
            retries={"max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if self._options.path_style else "auto"},
            max_pool_connections=self._options.max_pool_connections,
        )
        session = aioboto3.Session()
        self._client = await self._stack.enter_async_context(
            session.client(
                "s3",
                endpoint_url=self._options.endpoint_url,
                region_name=self._options.region,
                config=config,
            )
        )
        return self

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        if self._client is None:
            raise StorageError(f"{self!r} is not open")
        try:
            return await fn()
        except GatewayError:
            raise
        except Exception as exc:
            raise translate(exc, what) from exc

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")
        if end == start:
            return b""
        what = f"GET s3://{self._options.bucket}/{key} bytes={start}-{end - 1}"

        async def fetch() -> bytes:
            try:
                resp = await self._client.get_object(
                    Bucket=self._options.bucket, Key=key, Range=f"bytes={start}-{end - 1}"
                )
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""  # the range starts past the end: nothing there, as a file read
                raise
            return await _read_body(resp, what)

        return await self._call(what, fetch)

    async def get(self, key: str) -> bytes:
        what = f"GET s3://{self._options.bucket}/{key}"

        async def fetch() -> bytes:
            resp = await self._client.get_object(Bucket=self._options.bucket, Key=key)
            return await _read_body(resp, what)

        return await self._call(what, fetch)

    async def put(self, key: str, data: bytes) -> None:
        what = f"PUT s3://{self._options.bucket}/{key}"
        await self._call(
            what, lambda: self._client.put_object(Bucket=self._options.bucket, Key=key, Body=data)
        )

    async def head(self, key: str) -> ObjectInfo:
        what = f"HEAD s3://{self._options.bucket}/{key}"
        resp = await self._call(
            what, lambda: self._client.head_object(Bucket=self._options.bucket, Key=key)
        )
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"].timestamp())

    async def delete(self, key: str) -> None:
        what = f"DELETE s3://{self._options.bucket}/{key}"
        await self._call(
            what, lambda: self._client.delete_object(Bucket=self._options.bucket, Key=key)
        )

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        what = f"LIST s3://{self._options.bucket}/{prefix}"
        if self._client is None:
            raise StorageError(f"{self!r} is not open")
        paginator = self._client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self._options.bucket, Prefix=prefix)
        try:
            async for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"], int(obj["Size"]), obj["LastModified"].timestamp())
        except GatewayError:
            raise
        except Exception as exc:
            raise translate(exc, what) from exc


async def _read_body(resp: dict[str, Any], what: str) -> bytes:
    async with resp["Body"] as body:
        data: bytes = await body.read()
    expected = int(resp.get("ContentLength", len(data)))
    if len(data) != expected:
        raise StorageUnavailableError(f"{what}: body of {len(data)} bytes, expected {expected}")
    return data
