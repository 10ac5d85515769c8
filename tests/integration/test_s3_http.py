"""The signed data planes (httpx, aiohttp) against real servers: signed ranged GETs on the moto
server process (with moto's SigV4 verification switched on), keys that need URL-encoding,
missing keys and buckets, and a real short body."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Iterator

import boto3
import pytest

from gateway.errors import (
    ConfigurationError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.s3 import S3Options, S3Store
from gateway.storage.s3_http import (
    HttpOptions,
    S3AiohttpReader,
    S3HttpReader,
    StaticCredentials,
)

READERS = {"httpx": S3HttpReader, "aiohttp": S3AiohttpReader}

DATA = bytes(range(256)) * 64  # 16 KiB
KEYS = [
    "prefix/topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log",
    "with space/and=equals/plus+sign/00000000000000000000.log",
    "unicode/tôpic-€-日本/0/segment.log",
    "punctuation/!*'();:@&$,?#[]%~/x.index",
]
READ_ALL = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}],
}


def _moto_auth(endpoint: str, no_auth_actions: str) -> None:
    """Turn moto's request authentication on after ``no_auth_actions`` more requests (or off,
    with ``inf``), through its own admin endpoint (as moto's ``set_initial_no_auth_action_count``
    does in server mode)."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=no_auth_actions.encode(),
        method="POST",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.load(response)["status"] == "ok"


@pytest.fixture
def objects(moto_endpoint: str, s3_bucket: str) -> str:
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for key in KEYS:
        client.put_object(Bucket=s3_bucket, Key=key, Body=DATA)
    return s3_bucket


@pytest.fixture
def verified_signatures(moto_endpoint: str, objects: str) -> Iterator[StaticCredentials]:
    """Credentials of an IAM user allowed to read; moto checks every request's signature."""
    _moto_auth(moto_endpoint, "3")  # the three IAM calls below, then authentication
    try:
        iam = boto3.client("iam", endpoint_url=moto_endpoint, region_name="us-east-1")
        user = f"reader-{objects}"
        iam.create_user(UserName=user)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        iam.put_user_policy(UserName=user, PolicyName="read", PolicyDocument=json.dumps(READ_ALL))
        yield StaticCredentials(key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        _moto_auth(moto_endpoint, "inf")


@pytest.fixture(params=list(READERS))
def plane(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def store(moto_endpoint: str, objects: str, plane: str) -> AsyncIterator[S3Store]:
    options = S3Options(objects, moto_endpoint, "us-east-1", data_plane=plane)  # type: ignore[arg-type]
    s = await S3Store(options).open()
    try:
        yield s
    finally:
        await s.close()


async def test_signed_ranged_gets_pass_sigv4_verification(
    moto_endpoint: str, objects: str, verified_signatures: StaticCredentials, plane: str
) -> None:
    options = HttpOptions(objects, "us-east-1", moto_endpoint)
    reader = READERS[plane](options, verified_signatures)
    forged = READERS[plane](options, StaticCredentials(verified_signatures.access_key, "wrong"))
    try:
        for key in KEYS:
            assert await reader.get_range(key, 0, 1) == DATA[:1]
            assert await reader.get_range(key, 1000, 5000) == DATA[1000:5000]
            assert await reader.get_range(key, 16_000, 17_000) == DATA[16_000:]
            assert await reader.get(key) == DATA
            with pytest.raises(ConfigurationError, match="SignatureDoesNotMatch"):
                await forged.get_range(key, 0, 10)
        with pytest.raises(ObjectNotFoundError, match="NoSuchKey"):
            await reader.get_range("no/such key €", 0, 10)
    finally:
        await reader.aclose()
        await forged.aclose()


async def test_store_reads_encoded_keys_through_its_data_plane(store: S3Store) -> None:
    for key in KEYS:
        assert await store.get(key) == DATA
        assert await store.get_range(key, 4096, 8192) == DATA[4096:8192]
        assert await store.get_range(key, 20_000, 20_010) == b""  # starts past the end
    with pytest.raises(ObjectNotFoundError):
        await store.get_range("with space/missing=key €", 0, 10)
    with pytest.raises(ObjectNotFoundError):
        await store.get("with space/missing=key €")


async def test_many_concurrent_ranges_share_the_pool(store: S3Store) -> None:
    starts = range(0, len(DATA), 512)
    got = await asyncio.gather(*(store.get_range(KEYS[1], s, s + 700) for s in starts))
    assert got == [DATA[s : s + 700] for s in starts]


async def test_closed_store_refuses_reads(store: S3Store) -> None:
    await store.close()
    with pytest.raises(StorageError, match="not open"):
        await store.get_range(KEYS[0], 0, 10)


async def test_missing_bucket_is_the_store_away(moto_endpoint: str, plane: str) -> None:
    options = S3Options("no-such-bucket", moto_endpoint, "us-east-1", data_plane=plane)  # type: ignore[arg-type]
    s = await S3Store(options).open()
    try:
        with pytest.raises(StorageUnavailableError, match="NoSuchBucket"):
            await s.get_range("k", 0, 10)
    finally:
        await s.close()


async def test_a_real_short_body_is_retriable(plane: str) -> None:
    """A server that promises 100 bytes, sends 50 and hangs up."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/1000\r\n"
            b"Content-Length: 100\r\n\r\n" + b"x" * 50
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader = READERS[plane](
        HttpOptions("bkt", "us-east-1", f"http://127.0.0.1:{port}"), StaticCredentials("a", "b")
    )
    try:
        with pytest.raises(StorageUnavailableError, match=r"ProtocolError|PayloadError") as info:
            await reader.get_range("k", 0, 100)
        assert info.value.retriable
    finally:
        await reader.aclose()
        server.close()
        await server.wait_closed()
