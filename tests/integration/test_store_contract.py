"""One contract, two stores: the filesystem store and the S3 store on a real moto server, the
latter with each data plane (aiohttp, the default, through the factory; aioboto3's get_object;
httpx), the signed ones with SigV4-signed requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.errors import ObjectNotFoundError, StorageUnavailableError
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.s3 import S3Options, S3Store


@pytest.fixture(params=["filesystem", "s3", "s3-aioboto3", "s3-httpx"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> AsyncIterator[ObjectStore]:
    if request.param == "filesystem":
        s = await open_store(f"file://{tmp_path}")
    elif request.param in ("s3-aioboto3", "s3-httpx"):
        plane = request.param.removeprefix("s3-")
        options = S3Options(s3_bucket, moto_endpoint, "us-east-1", data_plane=plane)  # type: ignore[arg-type]
        s = await S3Store(options).open()
    else:
        s = await open_store(f"s3://{s3_bucket}", endpoint_url=moto_endpoint, region="us-east-1")
    try:
        yield s
    finally:
        await s.close()


async def test_round_trip_ranges_head_delete(store: ObjectStore) -> None:
    data = bytes(range(256)) * 100
    key = "prefix/topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log"
    await store.put(key, data)
    assert await store.get(key) == data
    for start, end in [(0, 1), (10, 20), (0, len(data)), (25_000, 25_600), (25_500, 99_999)]:
        assert await store.get_range(key, start, end) == data[start:end]
    assert await store.get_range(key, 30_000, 30_010) == b""  # starts past the end
    assert await store.get_range(key, 5, 5) == b""
    info = await store.head(key)
    assert info.key == key and info.size == len(data) and info.last_modified > 0
    await store.delete(key)
    await store.delete(key)
    with pytest.raises(ObjectNotFoundError):
        await store.get(key)
    with pytest.raises(ObjectNotFoundError):
        await store.get_range(key, 0, 10)
    with pytest.raises(ObjectNotFoundError):
        await store.head(key)


async def test_list_by_string_prefix_in_key_order(store: ObjectStore) -> None:
    keys = ["p/topic-b/0/x", "p/topic-a/1/y", "p/topic-a/0/z", "p/topic-a/0/a", "q/0/q", "p/top"]
    for k in keys:
        await store.put(k, k.encode())
    listed = [info async for info in store.list("p/topic-")]
    assert [i.key for i in listed] == [
        "p/topic-a/0/a",
        "p/topic-a/0/z",
        "p/topic-a/1/y",
        "p/topic-b/0/x",
    ]
    assert [i.size for i in listed] == [len(k) for k in sorted(keys) if k.startswith("p/topic-")]
    assert [i.key async for i in store.list("")] == sorted(keys)
    assert [i.key async for i in store.list("nothing/")] == []


async def test_s3_listing_paginates(moto_endpoint: str, s3_bucket: str) -> None:
    store = await open_store(f"s3://{s3_bucket}", endpoint_url=moto_endpoint, region="us-east-1")
    try:
        keys = [f"seg/{i:05d}" for i in range(1_100)]  # more than one 1000-key page
        for k in keys:
            await store.put(k, b"")
        assert [i.key async for i in store.list("seg/")] == keys
    finally:
        await store.close()


async def test_missing_bucket_is_the_store_away_not_a_deletion(moto_endpoint: str) -> None:
    store = await open_store("s3://no-such-bucket", endpoint_url=moto_endpoint, region="us-east-1")
    try:  # issue 33: a bucket gone while serving is retriable, never object_not_found
        with pytest.raises(StorageUnavailableError, match="NoSuchBucket"):
            await store.get("k")
        with pytest.raises(StorageUnavailableError):
            [i async for i in store.list("")]
    finally:
        await store.close()
