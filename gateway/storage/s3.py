"""The S3 store (``s3://bucket``): aioboto3, one pooled client per store (per process).

botocore's own retries are off: retries happen in :mod:`gateway.storage.retry`, inside the
request's deadline. Every failure is translated at this boundary
(:func:`gateway.storage.translate.map_exceptions`) by the one S3 error table in
:mod:`gateway.storage.s3_errors`, from structured error codes (never message text) into the
:mod:`gateway.errors` storage tree; a fault that never reached S3 names the endpoint. Credentials
come from the usual AWS sources (environment, profile, instance role), resolved once at
:meth:`S3Store.open`: none found is a :class:`~gateway.errors.ConfigurationError` there.

The data plane (``get``, ``get_range``) is the aiohttp + SigV4 client of
:mod:`gateway.storage.s3_http` by default (one pooled session per store, closed with the store):
botocore's request and response machinery cost 1.5-2.5x its CPU per GET (measured there).
``data_plane="aioboto3"`` reads with ``get_object``, ``"httpx"`` with the httpx client, kept so
the choice can be re-measured. Listing, HEAD, PUT and DELETE stay on aioboto3.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import aioboto3
import botocore.exceptions
from aiobotocore.config import AioConfig

from gateway.errors import ConfigurationError, StorageError, StorageUnavailableError
from gateway.storage.base import ObjectInfo
from gateway.storage.s3_errors import NO_CREDENTIALS, translate
from gateway.storage.s3_http import (
    HttpOptions,
    S3AiohttpReader,
    S3HttpReader,
    SessionCredentials,
)
from gateway.storage.translate import map_exceptions

__all__ = ["DataPlane", "S3Options", "S3Store", "translate"]

T = TypeVar("T")
DataPlane = Literal["aiohttp", "aioboto3", "httpx"]


@dataclass(frozen=True, slots=True)
class S3Options:
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    max_pool_connections: int = 64
    data_plane: DataPlane = "aiohttp"  # the client of get and get_range


class S3Store:
    """An :class:`~gateway.storage.base.ObjectStore` over one S3 bucket."""

    def __init__(self, options: S3Options) -> None:
        self._options = options
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._http: S3HttpReader | S3AiohttpReader | None = None
        self._endpoint = options.endpoint_url  # the one in use once open

    def __repr__(self) -> str:
        return f"S3Store(bucket={self._options.bucket!r}, endpoint={self._options.endpoint_url!r})"

    async def open(self) -> S3Store:
        config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if self._options.path_style else "auto"},
            max_pool_connections=self._options.max_pool_connections,
        )
        try:
            session = await self._session()
            await self._open_clients(session, config)
        except BaseException:
            await self.close()
            raise
        return self

    async def _session(self) -> Any:
        """A session that has walked the AWS credential chain once, now: without credentials
        the store is refused at open with every source named, instead of failing (after the
        instance-metadata probe's timeouts) at the first request. The session keeps what it
        found, for the clients and their refreshes."""
        where = f"s3://{self._options.bucket}" + (
            f" at endpoint {self._options.endpoint_url}" if self._options.endpoint_url else ""
        )
        with map_exceptions(f"open {where}", store="s3", endpoint=self._options.endpoint_url):
            session = aioboto3.Session()
            credentials = await session.get_credentials()
        if credentials is None:
            raise ConfigurationError(f"{where}: {NO_CREDENTIALS}")
        return session

    async def _open_clients(self, session: Any, config: AioConfig) -> None:
        self._client = await self._stack.enter_async_context(
            session.client(
                "s3",
                endpoint_url=self._options.endpoint_url,
                region_name=self._options.region,
                config=config,
            )
        )
        self._endpoint = self._client.meta.endpoint_url
        if self._options.data_plane != "aioboto3":
            meta = self._client.meta
            options = HttpOptions(
                self._options.bucket,
                region=meta.region_name or "us-east-1",
                endpoint_url=self._options.endpoint_url or meta.endpoint_url,
                path_style=self._options.path_style,
                max_connections=self._options.max_pool_connections,
            )
            reader = S3HttpReader if self._options.data_plane == "httpx" else S3AiohttpReader
            self._http = reader(options, SessionCredentials(session))
            self._stack.push_async_callback(self._http.aclose)

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None
        self._http = None

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        if self._client is None:
            raise StorageError(f"{self!r} is not open")
        with map_exceptions(what, store="s3", endpoint=self._endpoint):
            return await fn()

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")
        if end == start:
            return b""
        if self._http is not None:
            return await self._http.get_range(key, start, end)
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
        if self._http is not None:
            return await self._http.get(key)
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
        with map_exceptions(what, store="s3", endpoint=self._endpoint):
            async for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"], int(obj["Size"]), obj["LastModified"].timestamp())


async def _read_body(resp: dict[str, Any], what: str) -> bytes:
    async with resp["Body"] as body:
        data: bytes = await body.read()
    expected = int(resp.get("ContentLength", len(data)))
    if len(data) != expected:
        raise StorageUnavailableError(f"{what}: body of {len(data)} bytes, expected {expected}")
    return data
