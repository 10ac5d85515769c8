"""The S3 clients make exactly one request per call: retries belong to
:class:`gateway.storage.retry.Retrier` alone, inside the request's deadline. (botocore's
``max_attempts`` counts retries, not attempts: set to 1 it silently doubled every GET.)"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from gateway.errors import StorageUnavailableError
from gateway.storage.factory import open_store
from gateway.storage.s3 import S3Options, S3Store
from gateway.storage.sync import SyncStoreSpec
from tests.integration.fault_proxy import Faults, fault_proxy

KEY = "p/t-AAAAAAAAAAAAAAAAAAAAAA/0/x.log"


@pytest.fixture
def proxy(moto_endpoint: str, s3_bucket: str) -> Iterator[tuple[str, Faults]]:
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.put_object(Bucket=s3_bucket, Key=KEY, Body=b"x" * 1000)
    with fault_proxy(moto_endpoint) as running:
        running[1].mode = "503"
        yield running


@pytest.mark.parametrize("data_plane", ["aiohttp", "aioboto3", "httpx"])
async def test_async_store_one_request_per_call(
    proxy: tuple[str, Faults], s3_bucket: str, data_plane: str
) -> None:
    url, faults = proxy
    options = S3Options(s3_bucket, url, "us-east-1", path_style=True, data_plane=data_plane)  # type: ignore[arg-type]
    store = await S3Store(options).open()
    try:
        with pytest.raises(StorageUnavailableError, match="SlowDown"):
            await store.get_range(KEY, 0, 10)
        with pytest.raises(StorageUnavailableError, match="SlowDown"):
            await store.get(KEY)
    finally:
        await store.close()
    assert len(faults.gets()) == 2


def test_sync_store_one_request_per_call(proxy: tuple[str, Faults], s3_bucket: str) -> None:
    url, faults = proxy
    store = SyncStoreSpec(f"s3://{s3_bucket}", url, "us-east-1", path_style=True).open()
    try:
        with pytest.raises(StorageUnavailableError, match="SlowDown"):
            store.get_range(KEY, 0, 10)
    finally:
        store.close()
    assert len(faults.gets()) == 1


async def test_factory_store_passes_through_when_healthy(
    proxy: tuple[str, Faults], s3_bucket: str
) -> None:
    url, faults = proxy
    faults.mode = None
    store = await open_store(f"s3://{s3_bucket}", endpoint_url=url, region="us-east-1",
                             path_style=True)  # fmt: skip
    try:
        assert await store.get_range(KEY, 10, 20) == b"x" * 10
    finally:
        await store.close()
