"""Synchronous object stores, for Spark executors and batch jobs that run without an event loop.

The same contract as :class:`gateway.storage.base.ObjectStore` (half-open ranges, a range past
the end returns what exists, the :mod:`gateway.errors` storage tree, translated by
:func:`gateway.storage.translate.map_exceptions`), read-only, blocking. The
S3 store is a plain boto3 client (botocore's retries off, as the async store: callers retry with
:class:`gateway.storage.retry.RetryPolicy`); the filesystem store shares its key checks and error
mapping with :class:`gateway.storage.filesystem.FilesystemStore`. A store is picklable as its
:class:`SyncStoreSpec`, so the driver ships the spec and each executor opens its own client.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gateway.errors import ConfigurationError, StorageUnavailableError
from gateway.storage.base import ObjectInfo
from gateway.storage.filesystem import key_path, list_keys
from gateway.storage.s3_errors import NO_CREDENTIALS
from gateway.storage.translate import map_exceptions
from gateway.storage.url import parse_store_url

T = TypeVar("T")


class SyncObjectStore(Protocol):
    """The read side of a bucket, blocking."""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (fewer if it ends first)."""
        ...

    def get(self, key: str) -> bytes: ...

    def head(self, key: str) -> ObjectInfo: ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in UTF-8 byte order of their keys."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SyncStoreSpec:
    """How to open a store: small and picklable, what the driver sends to executors."""

    url: str
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    timeout_s: float = 30.0  # per S3 attempt: connect and each socket read

    def open(self) -> SyncObjectStore:
        where = parse_store_url(self.url)
        if isinstance(where, Path):
            return SyncFilesystemStore(where)
        return SyncS3Store(where, self.endpoint_url, self.region, self.path_style, self.timeout_s)


def _check_range(start: int, end: int) -> None:
    if start < 0 or end < start:
        raise ValueError(f"invalid range [{start}, {end})")


class SyncFilesystemStore:
    """A local directory as a bucket (``file:///abs/dir``)."""

    def __init__(self, root: Path) -> None:
        if not root.is_absolute():
            raise ConfigurationError(f"filesystem store root must be absolute, got {root}")
        self._root = root.resolve()

    def __repr__(self) -> str:
        return f"SyncFilesystemStore({str(self._root)!r})"

    def _run(self, key: str, fn: Callable[[], T]) -> T:
        with map_exceptions(key, store="filesystem", root=self._root):
            return fn()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        _check_range(start, end)

        def read() -> bytes:
            fd = os.open(key_path(self._root, key), os.O_RDONLY)
            try:
                return os.pread(fd, end - start, start)
            finally:
                os.close(fd)

        return self._run(key, read)

    def get(self, key: str) -> bytes:
        return self._run(key, lambda: key_path(self._root, key).read_bytes())

    def head(self, key: str) -> ObjectInfo:
        def stat() -> ObjectInfo:
            path = key_path(self._root, key)
            st = path.stat()
            if not path.is_file():
                raise IsADirectoryError(key)
            return ObjectInfo(key, st.st_size, st.st_mtime)

        return self._run(key, stat)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        yield from self._run(prefix, lambda: list_keys(self._root, prefix))

    def close(self) -> None:
        return None


class SyncS3Store:
    """One S3 bucket through a boto3 client (thread-safe; one per executor process)."""

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        region: str | None = None,
        path_style: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        import boto3  # noqa: PLC0415  (loaded for an s3:// store only)
        from botocore.config import Config  # noqa: PLC0415

        self._bucket = bucket
        config = Config(
            connect_timeout=min(timeout_s, 10.0),
            read_timeout=timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if path_style else "auto"},
            max_pool_connections=32,
        )
        where = f"s3://{bucket}" + (f" at endpoint {endpoint_url}" if endpoint_url else "")
        # the chain once, now: no credentials is refused here, not at every task's first read
        with map_exceptions(f"open {where}", store="s3", endpoint=endpoint_url):
            session = boto3.session.Session()
            credentials = session.get_credentials()
        if credentials is None:
            raise ConfigurationError(f"{where}: {NO_CREDENTIALS}")
        self._client: Any = session.client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )
        self._endpoint: str = self._client.meta.endpoint_url

    def __repr__(self) -> str:
        return f"SyncS3Store(bucket={self._bucket!r})"

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        with map_exceptions(what, store="s3", endpoint=self._endpoint):
            return fn()

    def _read(self, what: str, **kwargs: Any) -> bytes:
        def fetch() -> bytes:
            try:
                resp = self._client.get_object(Bucket=self._bucket, **kwargs)
            except self._client.exceptions.ClientError as exc:
                if "Range" in kwargs and exc.response.get("Error", {}).get("Code") == (
                    "InvalidRange"
                ):
                    return b""  # the range starts past the end, as a file read
                raise
            with resp["Body"] as body:
                data: bytes = body.read()
            expected = int(resp.get("ContentLength", len(data)))
            if len(data) != expected:
                raise StorageUnavailableError(
                    f"{what}: body of {len(data)} bytes, expected {expected}"
                )
            return data

        return self._call(what, fetch)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        _check_range(start, end)
        if end == start:
            return b""
        what = f"GET s3://{self._bucket}/{key} bytes={start}-{end - 1}"
        return self._read(what, Key=key, Range=f"bytes={start}-{end - 1}")

    def get(self, key: str) -> bytes:
        return self._read(f"GET s3://{self._bucket}/{key}", Key=key)

    def head(self, key: str) -> ObjectInfo:
        what = f"HEAD s3://{self._bucket}/{key}"
        resp = self._call(what, lambda: self._client.head_object(Bucket=self._bucket, Key=key))
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"].timestamp())

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        what = f"LIST s3://{self._bucket}/{prefix}"
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=prefix
        )
        with map_exceptions(what, store="s3", endpoint=self._endpoint):
            for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"], int(obj["Size"]), obj["LastModified"].timestamp())

    def close(self) -> None:
        self._client.close()
