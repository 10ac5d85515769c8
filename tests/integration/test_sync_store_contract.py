"""The synchronous stores of Spark executors against the same data the async stores wrote: the
filesystem store and boto3 on a real moto server, one contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.errors import ConfigurationError, InvalidKeyError, ObjectNotFoundError
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.sync import SyncObjectStore, SyncStoreSpec

KEY = "prefix/topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log"
DATA = bytes(range(256)) * 100
KEYS = ["p/topic-b/0/x", "p/topic-a/1/y", "p/topic-a/0/z", "p/topic-a/0/a", "q/0/q", "p/top"]


@pytest.fixture(params=["filesystem", "s3"])
def spec(
    request: pytest.FixtureRequest, tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> SyncStoreSpec:
    if request.param == "filesystem":
        return SyncStoreSpec(tmp_path.as_uri())
    return SyncStoreSpec(f"s3://{s3_bucket}", endpoint_url=moto_endpoint, region="us-east-1")


@pytest.fixture
async def writer(spec: SyncStoreSpec) -> AsyncIterator[ObjectStore]:
    store = await open_store(spec.url, endpoint_url=spec.endpoint_url, region=spec.region)
    try:
        for k in [KEY, *KEYS]:
            await store.put(k, DATA if k == KEY else k.encode())
        yield store
    finally:
        await store.close()


@pytest.fixture
def store(spec: SyncStoreSpec, writer: ObjectStore) -> Iterator[SyncObjectStore]:
    s = spec.open()
    try:
        yield s
    finally:
        s.close()


def test_ranges_get_and_head(store: SyncObjectStore) -> None:
    assert store.get(KEY) == DATA
    for start, end in [(0, 1), (10, 20), (0, len(DATA)), (25_000, 25_600), (25_500, 99_999)]:
        assert store.get_range(KEY, start, end) == DATA[start:end]
    assert store.get_range(KEY, 30_000, 30_010) == b""  # starts past the end
    assert store.get_range(KEY, 5, 5) == b""
    info = store.head(KEY)
    assert (info.key, info.size) == (KEY, len(DATA)) and info.last_modified > 0
    with pytest.raises(ValueError, match="invalid range"):
        store.get_range(KEY, 5, 4)


def test_missing_objects_are_object_not_found(store: SyncObjectStore) -> None:
    for call in (lambda: store.get("nope"), lambda: store.get_range("nope", 0, 9)):
        with pytest.raises(ObjectNotFoundError):
            call()
    with pytest.raises(ObjectNotFoundError):
        store.head("nope")


def test_list_by_string_prefix_in_key_order(store: SyncObjectStore) -> None:
    listed = list(store.list("p/topic-"))
    assert [i.key for i in listed] == [
        "p/topic-a/0/a",
        "p/topic-a/0/z",
        "p/topic-a/1/y",
        "p/topic-b/0/x",
    ]
    assert [i.size for i in listed] == [len(i.key) for i in listed]
    assert [i.key for i in store.list("")] == sorted([KEY, *KEYS])
    assert list(store.list("nothing/")) == []


def test_filesystem_refuses_keys_outside_the_root(tmp_path: Path) -> None:
    store = SyncStoreSpec(tmp_path.as_uri()).open()
    for key in ["../x", "/etc/passwd", "a//b", "a/./b"]:
        with pytest.raises(InvalidKeyError):
            store.get(key)


@pytest.mark.parametrize("url", ["s3://b/x", "file://host/x", "file:rel", "gs://b"])
def test_bad_urls_name_the_problem(url: str) -> None:
    with pytest.raises(ConfigurationError, match="store URL"):
        SyncStoreSpec(url).open()
