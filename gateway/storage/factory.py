"""Open a store from its URL."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gateway.storage.base import ObjectStore
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.url import parse_store_url

if TYPE_CHECKING:  # the S3 client (aioboto3, ~0.25 s to import) loads only for an s3:// store
    from gateway.storage.s3 import DataPlane


async def open_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    data_plane: DataPlane = "aiohttp",
) -> ObjectStore:
    """``file:///abs/dir`` gives a :class:`FilesystemStore`, ``s3://bucket`` an open
    :class:`S3Store` (the endpoint, region, addressing and data plane options apply to S3
    only)."""
    where = parse_store_url(url)
    if isinstance(where, Path):
        return FilesystemStore(where)
    from gateway.storage.s3 import S3Options, S3Store  # noqa: PLC0415

    options = S3Options(where, endpoint_url, region, path_style, data_plane=data_plane)
    return await S3Store(options).open()
