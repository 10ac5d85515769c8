"""Open a store from its URL."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from gateway.errors import ConfigurationError
from gateway.storage.base import ObjectStore
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.s3 import S3Options, S3Store

SUPPORTED = ("file:///absolute/dir", "s3://bucket")


async def open_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    data_plane: Literal["aioboto3", "httpx"] = "aioboto3",
) -> ObjectStore:
    """``file:///abs/dir`` gives a :class:`FilesystemStore`, ``s3://bucket`` an open
    :class:`S3Store` (the endpoint, region, addressing and data plane options apply to S3
    only)."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc or parsed.path not in ("", "/"):
            raise ConfigurationError(f"store URL {url!r}: expected s3://bucket")
        options = S3Options(parsed.netloc, endpoint_url, region, path_style, data_plane=data_plane)
        return await S3Store(options).open()
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"store URL {url!r}: file URLs take no host")
        path = Path(unquote(parsed.path))
        if not path.is_absolute():
            raise ConfigurationError(f"store URL {url!r}: the path must be absolute")
        return FilesystemStore(path)
    raise ConfigurationError(
        f"store URL {url!r}: unsupported scheme {parsed.scheme!r} "
        f"(supported: {', '.join(SUPPORTED)})"
    )
